import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import path from 'node:path';
import protobuf from 'protobufjs';
import { TYPE_URL_PREFIX } from './type-urls.js';

const require = createRequire(import.meta.url);

/** protobufjs' own folder: it ships `google/protobuf/descriptor.proto`, which the Envoy protos import. */
const PROTOBUFJS_DIR = path.dirname(require.resolve('protobufjs/package.json'));

/** Root folder of the proto trees shipped in `@grpc/grpc-js-xds` (`deps/`). */
export const PROTO_DEPS_DIR = path.join(
  path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')),
  'deps',
);

/** Include paths for the Envoy, xds, googleapis and protoc-gen-validate proto trees. */
export const PROTO_INCLUDE_DIRS: readonly string[] = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) =>
  path.join(PROTO_DEPS_DIR, d),
);

/** The proto files Trellis encodes and decodes (relative to {@link PROTO_INCLUDE_DIRS}). */
export const PROTO_FILES: readonly string[] = [
  'envoy/service/discovery/v3/ads.proto',
  'envoy/config/listener/v3/listener.proto',
  'envoy/config/cluster/v3/cluster.proto',
  'envoy/config/route/v3/route.proto',
  'envoy/config/endpoint/v3/endpoint.proto',
  'envoy/extensions/transport_sockets/tls/v3/secret.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy.proto',
  'envoy/extensions/filters/network/rbac/v3/rbac.proto',
  'envoy/extensions/filters/network/local_ratelimit/v3/local_rate_limit.proto',
  'envoy/extensions/filters/http/local_ratelimit/v3/local_rate_limit.proto',
  'envoy/extensions/filters/http/rbac/v3/rbac.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/listener/original_dst/v3/original_dst.proto',
  'envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector.proto',
  'envoy/extensions/filters/listener/http_inspector/v3/http_inspector.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
  'envoy/extensions/access_loggers/stream/v3/stream.proto',
  'envoy/config/trace/v3/zipkin.proto',
  'envoy/config/bootstrap/v3/bootstrap.proto',
  'envoy/admin/v3/config_dump.proto',
];

/** Options for {@link loadEnvoyRoot}/`@grpc/proto-loader` so field names stay as in the protos (snake_case). */
export const PROTO_LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: false,
  includeDirs: [...PROTO_INCLUDE_DIRS],
} as const;

/**
 * The `google.protobuf.Any` values (`{'@type': url, ...fields}`, the `typed_config` of filters
 * and transport sockets) already converted to protobufjs messages, by the identity of their
 * object form: the converted `Any` holds its payload encoded, so a typed config many resources
 * share, or a resource carries over from a push before, is converted and encoded once. Only
 * for objects never mutated after their first encoding (generated resources: see
 * `ResourceCheckCache`). Held weakly. Pass one to {@link EnvoyCodec.encodeMessage} or
 * {@link EnvoyCodec.encodeChecked} (of any codec: a memo holds messages of the codec that made them).
 */
export class AnyMemo {
  private readonly messages = new WeakMap<object, protobuf.Message>();
  private count = 0;

  /** How many `Any` values were converted (not found here) so far. */
  get converted(): number {
    return this.count;
  }

  /** The message of `object`, found or made by `convert` (and then kept). */
  message(object: object, convert: () => protobuf.Message): protobuf.Message {
    let found = this.messages.get(object);
    if (found === undefined) {
      found = convert();
      this.count++;
      this.messages.set(object, found);
    }
    return found;
  }
}

/**
 * The Envoy protos loaded ({@link PROTO_FILES}, field names in snake_case) and the encoding and
 * decoding of their messages, with what it looks up over and over kept on the instance: the
 * message types asked for (by name or type URL), the `Any` payload types found, and the
 * {@link AnyMemo} of the encoding under way (set and reset around each synchronous
 * `fromObject` call, never held past it). Everything it keeps is bounded by the protos
 * (a name not found is not kept). The process shares one ({@link envoyCodec}, which the
 * functions of this module use); a test may make its own, which shares nothing with it.
 */
export class EnvoyCodec {
  /** The protobufjs root holding every message of {@link PROTO_FILES} with their dependencies; not changed after loading (callers must not add to it). */
  readonly root: protobuf.Root;
  /** By fully-qualified name or type URL: the message types asked for so far. */
  readonly #types = new Map<string, protobuf.Type>();
  /** protobufjs' `fullName` is a getter that walks the namespace tree: these types are compared by identity instead. */
  readonly #any: protobuf.Type;
  readonly #struct: protobuf.Type;
  readonly #value: protobuf.Type;
  /** The memo of the encoding under way, while one with a memo runs. */
  #activeAnyMemo: AnyMemo | undefined;
  /** The `google.protobuf` wrapper types (`UInt32Value`, …), with the plain value a wrapper without `value` holds. */
  readonly #wrappers: ReadonlyMap<protobuf.Type, unknown>;
  readonly #duration: protobuf.Type;

  /**
   * Loads the protos (about a second of CPU).
   * @throws Error when a proto file cannot be found or parsed.
   */
  constructor() {
    const r = new protobuf.Root();
    r.resolvePath = (_origin, target) => {
      if (path.isAbsolute(target)) return target;
      for (const dir of [...PROTO_INCLUDE_DIRS, PROTOBUFJS_DIR]) {
        const candidate = path.join(dir, target);
        if (existsSync(candidate)) return candidate;
      }
      return target;
    };
    r.loadSync([...PROTO_FILES], { keepCase: true });
    r.resolveAll();
    freezeNames(r);
    cacheAnyLookups(r);
    this.root = r;
    this.#any = r.lookupType('google.protobuf.Any');
    this.#struct = r.lookupType('google.protobuf.Struct');
    this.#value = r.lookupType('google.protobuf.Value');
    this.#duration = r.lookupType('google.protobuf.Duration');
    this.#wrappers = new Map(Object.entries(WRAPPER_DEFAULTS).map(([name, plain]) => [r.lookupType(`google.protobuf.${name}`), plain]));
    this.#memoizeAnyConversions();
  }

  /**
   * Makes the `Any` type's `fromObject` (the wrapper that converts `{'@type', ...}` and encodes
   * the payload) consult this codec's active memo while an encoding with a memo runs. The
   * generated `fromObject` of every message with an `Any` field calls it through the type
   * object, so this one wrapper covers every nesting.
   */
  #memoizeAnyConversions(): void {
    const any = this.#any.setup();
    const convert = any.fromObject.bind(any) as (object: Record<string, unknown>, depth?: number) => protobuf.Message;
    (any as { fromObject: unknown }).fromObject = (object: Record<string, unknown>, depth?: number): protobuf.Message => {
      const memo = this.#activeAnyMemo;
      if (memo === undefined || object === null || typeof object !== 'object') return convert(object, depth);
      return memo.message(object, () => convert(object, depth));
    };
  }

  /** `type.fromObject(object)` with `memo` as the active memo (none: every `Any` converted anew). */
  #fromObjectWith(type: protobuf.Type, object: object, memo: AnyMemo | undefined): protobuf.Message {
    if (memo === undefined) return type.fromObject(object);
    const outer = this.#activeAnyMemo;
    this.#activeAnyMemo = memo;
    try {
      return type.fromObject(object);
    } finally {
      this.#activeAnyMemo = outer;
    }
  }

  /**
   * Looks up a message type by its fully-qualified name or type URL.
   * @throws Error when the message is not in the loaded protos.
   */
  messageType(nameOrTypeUrl: string): protobuf.Type {
    // protobufjs' lookup walks the namespace tree on every call; the hot paths (encode, validate)
    // ask for the same few dozen types over and over.
    let t = this.#types.get(nameOrTypeUrl);
    if (!t) {
      const name = nameOrTypeUrl.startsWith(TYPE_URL_PREFIX) ? nameOrTypeUrl.slice(TYPE_URL_PREFIX.length) : nameOrTypeUrl;
      t = this.root.lookupType(name); // throws when not found: only found types are kept
      this.#types.set(nameOrTypeUrl, t);
    }
    return t;
  }

  /** {@link assertKnownFields} with this codec's types. */
  assertKnownFields(type: protobuf.Type, object: unknown, where: string): void {
    this.#checkKnownFields(type, object, where);
  }

  #checkKnownFields(type: protobuf.Type, object: unknown, where: FieldPath | string): void {
    if (object === null || object === undefined || typeof object !== 'object') return;
    if (Buffer.isBuffer(object) || object instanceof Uint8Array) return;
    const obj = object as Record<string, unknown>;
    if (type === this.#any) {
      const at = obj['@type'];
      if (typeof at === 'string') {
        const inner = this.messageType(at);
        const rest: Record<string, unknown> = { ...obj };
        delete rest['@type'];
        this.#checkKnownFields(inner, rest, { up: where, segment: `<${inner.name}>` });
        return;
      }
    }
    if (type === this.#struct || type === this.#value) return;
    const fields = type.fields;
    for (const key in obj) {
      const value = obj[key];
      // Own fields only: `constructor`, `toString`, … are Object.prototype's, not the message's.
      const field = Object.hasOwn(fields, key) ? fields[key] : undefined;
      if (!field) {
        throw new Error(`${formatPath(where)}: unknown field "${key}" for ${type.fullName.slice(1)}`);
      }
      if (value === undefined || value === null) continue;
      const rt = field.resolvedType;
      if (!(rt instanceof protobuf.Type)) {
        if (INTEGER_RANGES[field.type] && !field.map) {
          for (const v of field.repeated && Array.isArray(value) ? value : [value]) {
            if (typeof v === 'number' && !fitsField(field.type, v)) {
              throw new Error(`${formatPath(where)}.${key}: ${v} does not fit ${field.type}`);
            }
          }
        }
        continue;
      }
      if (field.map) {
        for (const k in value as Record<string, unknown>) this.#checkKnownFields(rt, (value as Record<string, unknown>)[k], { up: where, segment: `.${key}[${k}]` });
      } else if (field.repeated) {
        const list = value as unknown[];
        for (let i = 0; i < list.length; i++) this.#checkKnownFields(rt, list[i], { up: where, segment: `.${key}[${i}]` });
      } else {
        this.#checkKnownFields(rt, value, { up: where, segment: `.${key}` });
      }
    }
  }

  /** `object` once {@link EnvoyCodec.assertKnownFields} found nothing wrong with it. */
  #checked(type: protobuf.Type, object: object): object {
    this.#checkKnownFields(type, object, type.name);
    return object;
  }

  /** {@link encodeMessage} with this codec's protos. */
  encodeMessage(typeUrl: string, object: object, knownFields = false, anyMemo?: AnyMemo): Buffer {
    const type = this.messageType(typeUrl);
    return encodeWith(type, this.#fromObjectWith(type, knownFields ? object : this.#checked(type, object), anyMemo));
  }

  /** {@link encodeChecked} with this codec's protos. */
  encodeChecked(typeUrl: string, object: object, anyMemo?: AnyMemo): EncodedMessage {
    const type = this.messageType(typeUrl);
    const message = this.#fromObjectWith(type, this.#checked(type, object), anyMemo);
    return { encoded: encodeWith(type, message), decoded: type.toObject(message, DECODED_FORM) as Record<string, unknown> };
  }

  /** {@link decodeMessage} with this codec's protos. */
  decodeMessage(typeUrl: string, bytes: Uint8Array): Record<string, unknown> {
    const type = this.messageType(typeUrl);
    return type.toObject(type.decode(bytes), DECODED_FORM) as Record<string, unknown>;
  }

  /**
   * `json` (plain JSON holding messages in {@link decodeMessage}'s form, each under an object
   * with its `@type`: a config dump) with the well-known types as proto3's JSON mapping prints
   * them, and so Envoy's admin `/config_dump`: every field of a `google.protobuf` wrapper type
   * (`UInt32Value`, `BoolValue`, … `{"value": 80}`) as its plain value (`80`; one without
   * `value` holds the default: `0`, `false`, `""`, `"0"` for 64-bit integers), and every
   * `google.protobuf.Duration` (`{"seconds": "1"}`) as a string of seconds (`"1s"`, `"0.250s"`).
   * Found by the messages' types (a message of another type with one field named `value`,
   * `envoy.type.v3.Percent`, stays), through nested `Any` values; what is outside a typed object,
   * or of a type not loaded, is kept as it is. Returns a copy; `json` is not changed.
   */
  toProto3Json(json: unknown): unknown {
    if (Array.isArray(json)) return json.map((item) => this.toProto3Json(item));
    if (json === null || typeof json !== 'object') return json;
    const obj = json as Record<string, unknown>;
    if (typeof obj['@type'] === 'string') return this.#plainMessage(this.#any, obj);
    const out: Record<string, unknown> = {};
    for (const key in obj) out[key] = this.toProto3Json(obj[key]);
    return out;
  }

  /** `value`, a message of `type` in decoded form, with its well-known fields in proto3 JSON (see {@link EnvoyCodec.toProto3Json}). */
  #plainMessage(type: protobuf.Type, value: unknown): unknown {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
    const obj = value as Record<string, unknown>;
    let t = type;
    if (t === this.#any) {
      const at = obj['@type'];
      if (typeof at !== 'string') return obj;
      try {
        t = this.messageType(at);
      } catch {
        return obj; // a type not loaded: as it is
      }
    }
    if (t === this.#struct || t === this.#value) return obj;
    const out: Record<string, unknown> = {};
    for (const key in obj) {
      const field = Object.hasOwn(t.fields, key) ? t.fields[key] : undefined;
      const rt = field?.resolvedType;
      const v = obj[key];
      if (!field || !(rt instanceof protobuf.Type) || v === null || v === undefined) {
        out[key] = v;
      } else if (field.map) {
        const entries: Record<string, unknown> = {};
        for (const k in v as Record<string, unknown>) entries[k] = this.#plainField(rt, (v as Record<string, unknown>)[k]);
        out[key] = entries;
      } else if (field.repeated && Array.isArray(v)) {
        out[key] = v.map((item) => this.#plainField(rt, item));
      } else {
        out[key] = this.#plainField(rt, v);
      }
    }
    return out;
  }

  #plainField(type: protobuf.Type, value: unknown): unknown {
    if (type === this.#duration) return durationJson(value);
    if (!this.#wrappers.has(type)) return this.#plainMessage(type, value);
    if (value === null || typeof value !== 'object') return value;
    const inner = (value as Record<string, unknown>).value;
    return inner === undefined ? this.#wrappers.get(type) : inner;
  }
}

/**
 * A `google.protobuf.Duration` in decoded form (`seconds` a string, `nanos` a number, either
 * absent when 0) as proto3's JSON mapping writes it: seconds with 0, 3, 6 or 9 fractional
 * digits and `s` (`"1s"`, `"0.250s"`, `"-1.000000001s"`). Anything else is returned as it is.
 */
function durationJson(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const { seconds = 0, nanos = 0 } = value as { seconds?: string | number; nanos?: number };
  const s = BigInt(seconds);
  const n = Number(nanos);
  if (!Number.isInteger(n) || Math.abs(n) >= 1e9) return value;
  const negative = s < 0n || n < 0;
  const whole = (s < 0n ? -s : s).toString();
  let fraction = Math.abs(n).toString().padStart(9, '0');
  if (n === 0) fraction = '';
  else if (fraction.endsWith('000000')) fraction = fraction.slice(0, 3);
  else if (fraction.endsWith('000')) fraction = fraction.slice(0, 6);
  return `${negative ? '-' : ''}${whole}${fraction ? `.${fraction}` : ''}s`;
}

/**
 * The `google.protobuf` wrapper messages (wrappers.proto) and what proto3's JSON mapping prints
 * for one holding its default (decoded without defaults, it has no `value`): 64-bit integers as
 * strings, bytes as base64.
 */
const WRAPPER_DEFAULTS: Readonly<Record<string, unknown>> = {
  DoubleValue: 0,
  FloatValue: 0,
  Int64Value: '0',
  UInt64Value: '0',
  Int32Value: 0,
  UInt32Value: 0,
  BoolValue: false,
  StringValue: '',
  BytesValue: '',
};

let shared: EnvoyCodec | undefined;

/**
 * The process's {@link EnvoyCodec}, loaded on first use. It is the one piece of module state
 * here: what it keeps is a function of {@link PROTO_FILES} alone (the loaded protos and lookups
 * in them) and the memo of an encoding under way lives only during that call, so no caller,
 * test or not, sees another's.
 * @throws Error when a proto file cannot be found or parsed.
 */
export function envoyCodec(): EnvoyCodec {
  return (shared ??= new EnvoyCodec());
}

/**
 * Loads (once) and returns the protobufjs root holding every message in {@link PROTO_FILES}
 * with their dependencies, field names kept in snake_case: {@link envoyCodec}'s. The root is not
 * changed afterwards (callers must not add to it): reflection objects can be keys of caches that outlive a call.
 * @throws Error when a proto file cannot be found or parsed.
 */
export function loadEnvoyRoot(): protobuf.Root {
  return envoyCodec().root;
}

/**
 * protobufjs computes `fullName` by walking up the namespace tree on every read, and its
 * `Any` wrapper reads it for every `Any` it converts. The tree is complete once loaded: pin
 * each object's `fullName` as a plain property.
 */
function freezeNames(ns: protobuf.NamespaceBase): void {
  for (const child of ns.nestedArray) {
    Object.defineProperty(child, 'fullName', { value: child.fullName, writable: false, configurable: true });
    if (child instanceof protobuf.Namespace) freezeNames(child);
  }
}

/**
 * protobufjs' `Any` wrapper looks the payload type up by name (a namespace walk) for every
 * `Any` it encodes or decodes; remember the types found (the loaded tree does not change), on
 * the root's own `Any` type. A name not found is not remembered, so what is kept is bounded by
 * the protos whatever `Any` type URLs are decoded.
 */
function cacheAnyLookups(r: protobuf.Root): void {
  const any = r.lookupType('google.protobuf.Any');
  const lookup = any.lookup.bind(any);
  const found = new Map<string, protobuf.ReflectionObject>();
  any.lookup = (path: string | string[], filterTypes?: unknown, parentAlreadyChecked?: boolean) => {
    if (typeof path !== 'string' || filterTypes !== undefined || parentAlreadyChecked !== undefined) {
      return lookup(path, filterTypes as never, parentAlreadyChecked);
    }
    const hit = found.get(path);
    if (hit !== undefined) return hit;
    const looked = lookup(path);
    if (looked !== null) found.set(path, looked);
    return looked;
  };
}

/**
 * Looks up a message type by its fully-qualified name or type URL ({@link envoyCodec}'s).
 * @throws Error when the message is not in the loaded protos.
 */
export function messageType(nameOrTypeUrl: string): protobuf.Type {
  return envoyCodec().messageType(nameOrTypeUrl);
}

/** A `google.protobuf.Any` with its value already encoded. */
export interface EncodedAny {
  type_url: string;
  value: Buffer;
}

/** A field path built only when an error needs it: the parent path and this step's segment. */
interface FieldPath {
  readonly up: FieldPath | string;
  readonly segment: string;
}

function formatPath(path: FieldPath | string): string {
  return typeof path === 'string' ? path : `${formatPath(path.up)}${path.segment}`;
}

/**
 * The integers each protobuf integer type holds (as JavaScript numbers: 64-bit ones up to 2^53);
 * protobufjs would otherwise wrap or truncate a value that does not fit, silently.
 */
const INTEGER_RANGES: Readonly<Record<string, readonly [number, number]>> = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  sint32: [-(2 ** 31), 2 ** 31 - 1],
  sfixed32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1],
  fixed32: [0, 2 ** 32 - 1],
  int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  sint64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  sfixed64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  uint64: [0, Number.MAX_SAFE_INTEGER],
  fixed64: [0, Number.MAX_SAFE_INTEGER],
};

/**
 * Throws when `object` has a key that is not a field of `type` (protobufjs' `fromObject`
 * drops such keys silently, which would make a misspelt Envoy field vanish), or a number that
 * does not fit its integer field (a fraction, or out of range: protobufjs would wrap it). Walks
 * nested messages, repeated fields, maps and `Any` values carrying `@type`.
 * @param where field path used in the error message, e.g. `Listener.filter_chains[0]`.
 * @throws Error naming the path of the unknown field, or of the integer that does not fit.
 */
export function assertKnownFields(type: protobuf.Type, object: unknown, where: string): void {
  envoyCodec().assertKnownFields(type, object, where);
}

/**
 * True when the number `value` can be written to a field of protobuf scalar type `fieldType`
 * unchanged: integer types need a whole number within their range (64-bit ones within the safe
 * integers); `float`, `double` and non-numeric types accept any.
 */
export function fitsField(fieldType: string, value: number): boolean {
  const range = INTEGER_RANGES[fieldType];
  return !range || (Number.isInteger(value) && value >= range[0] && value <= range[1]);
}

/**
 * Encodes a plain object (snake_case field names, nested `Any` values as `{'@type': url, ...fields}`)
 * as the message named by `typeUrl`.
 * @param knownFields true when `object` is known to pass {@link assertKnownFields} (it is alike
 *   one that did: `validLike`), so that walk is skipped.
 * @param anyMemo the `Any` values converted before, to reuse and add to (see {@link AnyMemo}).
 * @returns the protobuf wire bytes.
 * @throws Error when a field is unknown, a nested `@type` is not loaded, or a value does not fit its field.
 */
export function encodeMessage(typeUrl: string, object: object, knownFields = false, anyMemo?: AnyMemo): Buffer {
  return envoyCodec().encodeMessage(typeUrl, object, knownFields, anyMemo);
}

function encodeWith(type: protobuf.Type, message: protobuf.Message): Buffer {
  return Buffer.from(type.encode(message).finish());
}

/**
 * The wire bytes of a message given as parts (`NamedResource.parts`: messages of its type that
 * set disjoint fields and share no oneof) from the parts' own encodings: their concatenation,
 * in order (protobuf: concatenated encodings of one message type parse as their merge, which
 * with disjoint fields is exactly their union). The one place that joins parts: encode them
 * one by one ({@link encodeChecked}, or {@link encodeMessage}) and join them here.
 * @param encodings each part's encoding, the base first.
 */
export function joinEncodedParts(encodings: readonly Uint8Array[]): Buffer {
  return Buffer.concat(encodings);
}

/** What {@link encodeChecked} returns. */
export interface EncodedMessage {
  /** The protobuf wire bytes. */
  readonly encoded: Buffer;
  /** The message as {@link decodeMessage} would return it from `encoded`. */
  readonly decoded: Record<string, unknown>;
}

/**
 * Encodes like {@link encodeMessage} and also returns the message in decoded form, converted
 * from the message protobufjs encoded rather than parsed back from the bytes: protobufjs'
 * `decode` is the inverse of its `encode`, so both give the same object, and the parse costs
 * as much as the encode. (`fromObject` already coerces every value to its field's type, so
 * protobufjs' `verify` pass would find nothing and is not run.)
 * @param anyMemo as {@link encodeMessage}'s.
 * @throws Error as {@link encodeMessage}.
 */
export function encodeChecked(typeUrl: string, object: object, anyMemo?: AnyMemo): EncodedMessage {
  return envoyCodec().encodeChecked(typeUrl, object, anyMemo);
}

const DECODED_FORM: protobuf.IConversionOptions = { enums: String, longs: String, bytes: String, json: true };

/**
 * Encodes a resource into an `Any` ready to go in a `DiscoveryResponse.resources`.
 * @throws Error as {@link encodeMessage}.
 */
export function encodeAny(typeUrl: string, object: object): EncodedAny {
  return { type_url: typeUrl, value: encodeMessage(typeUrl, object) };
}

/**
 * Decodes wire bytes of `typeUrl` into a plain object with Envoy's field names, enums as
 * names, 64-bit integers as strings, and every nested `Any` decoded with an `@type` key
 * (the shape of Envoy's JSON config dump).
 * @throws Error when the bytes are not a valid message of that type.
 */
export function decodeMessage(typeUrl: string, bytes: Uint8Array): Record<string, unknown> {
  return envoyCodec().decodeMessage(typeUrl, bytes);
}

/** Decodes an encoded `Any` (see {@link decodeMessage}) and adds its `@type`. */
export function decodeAny(any: { type_url: string; value: Uint8Array }): Record<string, unknown> {
  return { '@type': any.type_url, ...decodeMessage(any.type_url, any.value) };
}
