/**
 * The wire encoding of ADS responses (`envoy.service.discovery.v3.DiscoveryResponse` and
 * `DeltaDiscoveryResponse`), made of parts: each resource's framing (its `Any` type URL, and
 * for delta its `Resource` name and version) is encoded once per resource object and kept
 * while the object lives, so a push of the same resources to a thousand proxies encodes only
 * the few fields of each response and copies the resources' bytes. Protobuf wire format
 * (https://protobuf.dev/programming-guides/encoding/), byte for byte as protobufjs writes the
 * same object: fields in number order, a string or bytes field written whenever it is set (even
 * empty), an empty list not at all.
 */
import type { EncodedAny } from './codec.js';

/** A SotW response as the ADS server writes it. */
export interface SotwResponseParts {
  readonly version_info?: string;
  readonly resources?: readonly EncodedAny[];
  readonly type_url?: string;
  readonly nonce?: string;
}

/** A delta `Resource` as the ADS server writes it. */
export interface DeltaResourceParts {
  readonly name: string;
  readonly version: string;
  readonly resource: EncodedAny;
}

/** A delta response as the ADS server writes it. */
export interface DeltaResponseParts {
  readonly system_version_info?: string;
  readonly resources?: readonly DeltaResourceParts[];
  readonly type_url?: string;
  readonly nonce?: string;
  readonly removed_resources?: readonly string[];
}

/** Wire type of a length-delimited field. */
const LEN = 2;

function varint(n: number): number[] {
  const out: number[] = [];
  let v = n;
  while (v > 0x7f) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return out;
}

/** Tag and length of a length-delimited field of `length` bytes. */
function header(field: number, length: number): number[] {
  return [...varint((field << 3) | LEN), ...varint(length)];
}

/** A string field, or nothing when unset. */
function stringField(field: number, value: string | undefined): Buffer[] {
  if (value === undefined || value === null) return [];
  const bytes = Buffer.from(value, 'utf8');
  return [Buffer.from(header(field, bytes.length)), bytes];
}

function byteLength(parts: readonly Buffer[]): number {
  let n = 0;
  for (const p of parts) n += p.length;
  return n;
}

/** Encodes ADS responses from parts; see the module comment. One per server (its memo lives as long as the resources). */
export class ResponseEncoder {
  /** Per `Any`: the bytes before its value as field 2 (`resources`) of a `DiscoveryResponse` (tag, lengths, type URL). */
  private readonly anyPrefixes = new WeakMap<EncodedAny, Buffer>();
  /** Per delta resource: the bytes before and after its `Any` value as field 2 of a `DeltaDiscoveryResponse`. */
  private readonly resourceParts = new WeakMap<DeltaResourceParts, { readonly prefix: Buffer; readonly suffix: Buffer }>();

  /** The bytes of a `DiscoveryResponse`. */
  sotw(response: SotwResponseParts): Buffer {
    const parts: Buffer[] = [...stringField(1, response.version_info)];
    for (const any of response.resources ?? []) parts.push(this.anyPrefix(any), any.value);
    parts.push(...stringField(4, response.type_url), ...stringField(5, response.nonce));
    return Buffer.concat(parts, byteLength(parts));
  }

  /** The bytes of a `DeltaDiscoveryResponse`. */
  delta(response: DeltaResponseParts): Buffer {
    const parts: Buffer[] = [...stringField(1, response.system_version_info)];
    for (const resource of response.resources ?? []) {
      const { prefix, suffix } = this.resourcePart(resource);
      parts.push(prefix, resource.resource.value, suffix);
    }
    parts.push(...stringField(4, response.type_url), ...stringField(5, response.nonce));
    for (const name of response.removed_resources ?? []) parts.push(...stringField(6, name));
    return Buffer.concat(parts, byteLength(parts));
  }

  /** Tag, length and type URL of `any` as field 2 of a `DiscoveryResponse`, up to its value's bytes. */
  private anyPrefix(any: EncodedAny): Buffer {
    let prefix = this.anyPrefixes.get(any);
    if (!prefix) {
      prefix = anyHeader(any, 2);
      this.anyPrefixes.set(any, prefix);
    }
    return prefix;
  }

  private resourcePart(resource: DeltaResourceParts): { readonly prefix: Buffer; readonly suffix: Buffer } {
    let part = this.resourceParts.get(resource);
    if (!part) {
      const version = stringField(1, resource.version);
      const any = anyHeader(resource.resource, 2);
      const suffix = Buffer.concat(stringField(3, resource.name));
      const length = byteLength(version) + any.length + resource.resource.value.length + suffix.length;
      part = { prefix: Buffer.concat([Buffer.from(header(2, length)), ...version, any]), suffix };
      this.resourceParts.set(resource, part);
    }
    return part;
  }
}

/** Tag and length of an `Any` as field `field`, its type URL, and the tag and length of its value (the value's bytes follow). */
function anyHeader(any: EncodedAny, field: number): Buffer {
  const typeUrl = stringField(1, any.type_url);
  const valueHeader = Buffer.from(header(2, any.value.length));
  const length = byteLength(typeUrl) + valueHeader.length + any.value.length;
  return Buffer.concat([Buffer.from(header(field, length)), ...typeUrl, valueHeader]);
}
