import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { Ajv } from 'ajv';
import type { ErrorObject, ValidateFunction } from 'ajv';
import { parseAllDocuments } from 'yaml';
import type { ObjectKind } from '../../store/objects.js';

/**
 * JSON schemas for the manifests Trellis reads, and a validator that reports errors with
 * field paths.
 *
 * - SMI kinds and MeshConfig: the `openAPIV3Schema` of the CRDs in `./schemas/crds/` (copied
 *   from OSM v1.2.4), plus a few stricter checks of what Trellis relies on (TrafficSplit
 *   weights are non-negative integers, TCPRoute ports are 1-65535).
 * - Core kinds: small schemas written here, covering only the fields Trellis reads (ports are
 *   integers 1-65535, IPs are IPs, labels are strings, ...). Unknown fields are accepted, as
 *   the Kubernetes API server prunes or accepts them.
 */

/** A path into an object: property names and array indexes, e.g. `['spec', 'backends', 0, 'weight']`. */
export type FieldPath = readonly (string | number)[];

/** One schema violation: where (path of the offending field) and what, e.g. `must be integer`. */
export interface SchemaViolation {
  path: FieldPath;
  message: string;
}

const STRING_MAP = { type: 'object', additionalProperties: { type: 'string' } };
const PORT = { type: 'integer', minimum: 1, maximum: 65535 };
const METADATA = {
  type: 'object',
  required: ['name'],
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 253 },
    namespace: { type: 'string', minLength: 1, maxLength: 63 },
    labels: STRING_MAP,
    annotations: STRING_MAP,
  },
};
const POD_SPEC = {
  type: 'object',
  properties: {
    serviceAccountName: { type: 'string' },
    containers: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name'],
        properties: {
          name: { type: 'string' },
          ports: {
            type: 'array',
            items: {
              type: 'object',
              required: ['containerPort'],
              properties: {
                name: { type: 'string' },
                containerPort: PORT,
                protocol: { enum: ['TCP', 'UDP', 'SCTP'] },
              },
            },
          },
        },
      },
    },
  },
};
const ENDPOINT_PORT = {
  type: 'object',
  properties: { name: { type: 'string' }, port: PORT, protocol: { enum: ['TCP', 'UDP', 'SCTP'] }, appProtocol: { type: 'string' } },
};
const ENDPOINT_ADDRESS = {
  type: 'object',
  required: ['ip'],
  properties: { ip: { type: 'string', format: 'ip' }, hostname: { type: 'string' } },
};

/** Schemas written for the core kinds (the fields Trellis reads). */
const CORE_SCHEMAS: Partial<Record<ObjectKind, object>> = {
  Namespace: {},
  ServiceAccount: {},
  Service: {
    type: 'object',
    properties: {
      spec: {
        type: 'object',
        properties: {
          selector: STRING_MAP,
          clusterIP: { type: 'string', anyOf: [{ format: 'ip' }, { enum: ['None', ''] }], description: 'must be an IP address or "None"' },
          clusterIPs: { type: 'array', items: { type: 'string', anyOf: [{ format: 'ip' }, { enum: ['None'] }], description: 'must be an IP address or "None"' } },
          type: { enum: ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'] },
          ports: {
            type: 'array',
            items: {
              type: 'object',
              required: ['port'],
              properties: {
                name: { type: 'string' },
                port: PORT,
                targetPort: { anyOf: [PORT, { type: 'string', minLength: 1 }], description: 'must be a port number (1-65535) or a container port name' },
                protocol: { enum: ['TCP', 'UDP', 'SCTP'] },
                appProtocol: { type: 'string' },
              },
            },
          },
        },
      },
    },
  },
  Endpoints: {
    type: 'object',
    properties: {
      subsets: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            addresses: { type: 'array', items: ENDPOINT_ADDRESS },
            notReadyAddresses: { type: 'array', items: ENDPOINT_ADDRESS },
            ports: { type: 'array', items: { ...ENDPOINT_PORT, required: ['port'] } },
          },
        },
      },
    },
  },
  EndpointSlice: {
    type: 'object',
    required: ['addressType'],
    properties: {
      addressType: { enum: ['IPv4', 'IPv6', 'FQDN'] },
      endpoints: {
        type: 'array',
        items: {
          type: 'object',
          required: ['addresses'],
          properties: {
            addresses: { type: 'array', minItems: 1, items: { type: 'string' } },
            conditions: { type: 'object', properties: { ready: { type: 'boolean' } } },
          },
        },
      },
      ports: { type: 'array', items: ENDPOINT_PORT },
    },
  },
  Pod: {
    type: 'object',
    properties: {
      spec: POD_SPEC,
      status: {
        type: 'object',
        properties: {
          podIP: { type: 'string', format: 'ip' },
          podIPs: { type: 'array', items: { type: 'object', required: ['ip'], properties: { ip: { type: 'string', format: 'ip' } } } },
          phase: { type: 'string' },
        },
      },
    },
  },
  Ingress: {
    type: 'object',
    properties: {
      spec: {
        type: 'object',
        properties: {
          ingressClassName: { type: 'string' },
          rules: {
            type: 'array',
            items: {
              type: 'object',
              properties: {
                host: { type: 'string' },
                http: {
                  type: 'object',
                  required: ['paths'],
                  properties: {
                    paths: {
                      type: 'array',
                      items: {
                        type: 'object',
                        required: ['pathType', 'backend'],
                        properties: {
                          path: { type: 'string' },
                          pathType: { enum: ['Exact', 'Prefix', 'ImplementationSpecific'] },
                          backend: {
                            type: 'object',
                            properties: {
                              service: {
                                type: 'object',
                                required: ['name'],
                                properties: { name: { type: 'string', minLength: 1 }, port: { type: 'object', properties: { number: PORT, name: { type: 'string' } } } },
                              },
                            },
                          },
                        },
                      },
                    },
                  },
                },
              },
            },
          },
        },
      },
    },
  },
  Deployment: {
    type: 'object',
    required: ['spec'],
    properties: {
      spec: {
        type: 'object',
        required: ['template'],
        properties: {
          replicas: { type: 'integer', minimum: 0 },
          selector: { type: 'object', properties: { matchLabels: STRING_MAP } },
          template: {
            type: 'object',
            properties: { metadata: { type: 'object', properties: { labels: STRING_MAP } }, spec: POD_SPEC },
          },
        },
      },
    },
  },
};

/** Stricter checks for CRD kinds, on top of the CRD's own schema (what Trellis's code assumes). */
const EXTRA_SCHEMAS: Partial<Record<ObjectKind, object>> = {
  TrafficSplit: {
    type: 'object',
    properties: {
      spec: {
        type: 'object',
        properties: {
          backends: { type: 'array', items: { type: 'object', properties: { weight: { type: 'integer', minimum: 0 } } } },
        },
      },
    },
  },
  TCPRoute: {
    type: 'object',
    properties: { spec: { type: 'object', properties: { matches: { type: 'object', properties: { ports: { type: 'array', items: PORT } } } } } },
  },
};

/** The CRD file of each custom kind. */
const CRD_FILES: Partial<Record<ObjectKind, string>> = {
  TrafficTarget: 'smi_traffic_access.yaml',
  HTTPRouteGroup: 'smi_http_route_group.yaml',
  TCPRoute: 'smi_tcp_route.yaml',
  TrafficSplit: 'smi_traffic_split.yaml',
  MeshConfig: 'config_meshconfig.yaml',
  IngressBackend: 'policy_ingress_backend.yaml',
  Egress: 'policy_egress.yaml',
  Retry: 'policy_retry.yaml',
  UpstreamTrafficSetting: 'policy_upstream_traffic_setting.yaml',
};

/** The directory of the copied CRDs (a `file:` URL). */
export const CRD_DIRECTORY = new URL('./schemas/crds/', import.meta.url);

interface CrdVersion {
  name: string;
  schema?: { openAPIV3Schema?: object };
}

/**
 * Reads the `openAPIV3Schema` of every version of the CRD in `fileName` (under
 * {@link CRD_DIRECTORY}).
 * @returns version name → schema.
 * @throws Error if the file is missing or holds no CustomResourceDefinition.
 */
export function loadCrdSchemas(fileName: string): Map<string, object> {
  const text = readFileSync(new URL(fileName, CRD_DIRECTORY), 'utf8');
  for (const doc of parseAllDocuments(text)) {
    const crd = doc.toJS() as { kind?: string; spec?: { group?: string; versions?: CrdVersion[] } } | null;
    if (crd?.kind !== 'CustomResourceDefinition') continue;
    const schemas = new Map<string, object>();
    for (const version of crd.spec?.versions ?? []) {
      const schema = version.schema?.openAPIV3Schema;
      if (schema) schemas.set(`${crd.spec?.group}/${version.name}`, schema);
    }
    return schemas;
  }
  throw new Error(`${fileName}: no CustomResourceDefinition found`);
}

/**
 * Validates manifests of the kinds in the store against their schemas. Built once (schemas
 * compile lazily per kind and apiVersion) and shared.
 */
export class SchemaValidator {
  readonly #ajv: Ajv;
  readonly #compiled = new Map<string, ValidateFunction[]>();
  /** The CRD schema of each kind and apiVersion read so far (null: the kind has none). */
  readonly #crdSchemas = new Map<string, object | null>();

  /** Creates a validator; nothing is read or compiled until first use. */
  constructor() {
    // strict: false: the CRDs use OpenAPI keywords (description, nullable, ...) Ajv doesn't know.
    // verbose: errors carry their schema, whose description words an anyOf's message.
    this.#ajv = new Ajv({ allErrors: true, strict: false, verbose: true });
    this.#ajv.addFormat('ip', { type: 'string', validate: (s: string) => isIP(s) !== 0 });
    this.#ajv.addSchema({ $id: 'metadata', type: 'object', properties: { metadata: METADATA }, required: ['metadata'] });
  }

  /**
   * The violations of `object` (a `kind` manifest of `apiVersion`) against its schemas,
   * sorted by path and without duplicates; empty if valid.
   * @throws Error if a CRD file is missing or unreadable (a packaging error, not a manifest error).
   */
  validate(kind: ObjectKind, apiVersion: string, object: unknown): SchemaViolation[] {
    const violations = new Map<string, SchemaViolation>();
    for (const validate of this.#validators(kind, apiVersion)) {
      if (validate(object)) continue;
      const errors = validate.errors ?? [];
      // An anyOf reports each failed branch too; keep only the anyOf's own error.
      const anyOfPaths = errors.filter((e) => e.keyword === 'anyOf').map((e) => `${e.schemaPath}/`);
      for (const error of errors) {
        if (anyOfPaths.some((p) => error.schemaPath.startsWith(p))) continue;
        const violation = toViolation(error);
        if (!violation) continue;
        // One type error per field ("must be number" and "must be integer" say the same).
        const id = `${violation.path.join('.')}\0${error.keyword === 'type' ? 'type' : violation.message}`;
        if (!violations.has(id)) violations.set(id, violation);
      }
    }
    return [...violations.values()].sort((a, b) => comparePaths(a.path, b.path));
  }

  /**
   * The fields of `object` (a `kind` manifest of `apiVersion`) that its CRD's schema does not
   * declare where the schema lists its properties: most likely typos (`enablePermisiveTraffic…`),
   * which the API server would prune and Trellis ignores, leaving the default in force. Core
   * kinds have none: their schemas here cover only the fields Trellis reads. Paths sorted.
   * @throws Error if a CRD file is missing or unreadable.
   */
  unknownFields(kind: ObjectKind, apiVersion: string, object: unknown): FieldPath[] {
    const schema = this.#crdSchema(kind, apiVersion);
    if (!schema) return [];
    const out: FieldPath[] = [];
    collectUnknownFields(schema as OpenApiSchema, object, [], out);
    return out.sort(comparePaths);
  }

  /** The `openAPIV3Schema` of `kind`'s CRD for `apiVersion`, read once; undefined for core kinds. */
  #crdSchema(kind: ObjectKind, apiVersion: string): object | undefined {
    const cacheKey = `${kind} ${apiVersion}`;
    let schema = this.#crdSchemas.get(cacheKey);
    if (schema === undefined) {
      const crdFile = CRD_FILES[kind];
      schema = (crdFile ? loadCrdSchemas(crdFile).get(apiVersion) : undefined) ?? null;
      this.#crdSchemas.set(cacheKey, schema);
    }
    return schema ?? undefined;
  }

  #validators(kind: ObjectKind, apiVersion: string): ValidateFunction[] {
    const cacheKey = `${kind} ${apiVersion}`;
    let validators = this.#compiled.get(cacheKey);
    if (validators) return validators;
    validators = [this.#ajv.getSchema('metadata') as ValidateFunction];
    const schema = this.#crdSchema(kind, apiVersion);
    if (schema) validators.push(this.#ajv.compile(schema));
    const own = CORE_SCHEMAS[kind] ?? EXTRA_SCHEMAS[kind];
    if (own) validators.push(this.#ajv.compile(own));
    this.#compiled.set(cacheKey, validators);
    return validators;
  }
}

const OBJECT_ROOT_FIELDS = new Set(['apiVersion', 'kind', 'metadata', 'status']);

/** The parts of an OpenAPI v3 schema (as in a CRD) that say which fields exist. */
interface OpenApiSchema {
  properties?: Record<string, OpenApiSchema>;
  additionalProperties?: boolean | OpenApiSchema;
  items?: OpenApiSchema;
  allOf?: OpenApiSchema[];
  anyOf?: OpenApiSchema[];
  oneOf?: OpenApiSchema[];
  'x-kubernetes-preserve-unknown-fields'?: boolean;
}

/**
 * Adds to `out` the path of every key of `value` that `schema` does not declare, where it
 * declares `properties` and allows nothing else (no `additionalProperties`, no
 * `x-kubernetes-preserve-unknown-fields`). Properties of `allOf`/`anyOf`/`oneOf` branches count
 * as declared; a branch that lists none leaves the object open.
 */
function collectUnknownFields(schema: OpenApiSchema, value: unknown, path: FieldPath, out: FieldPath[]): void {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    if (schema.items) value.forEach((item, i) => collectUnknownFields(schema.items!, item, [...path, i], out));
    return;
  }
  if (schema['x-kubernetes-preserve-unknown-fields'] === true) return;
  const branches = [...(schema.allOf ?? []), ...(schema.anyOf ?? []), ...(schema.oneOf ?? [])];
  const declared = new Map<string, OpenApiSchema>(Object.entries(schema.properties ?? {}));
  let open = schema.properties === undefined || (schema.additionalProperties !== undefined && schema.additionalProperties !== false);
  for (const branch of branches) {
    if (branch.properties === undefined) open = true;
    for (const [k, v] of Object.entries(branch.properties ?? {})) if (!declared.has(k)) declared.set(k, v);
  }
  for (const [k, v] of Object.entries(value)) {
    // Every object has these at its root, whether or not its CRD's schema lists them.
    if (path.length === 0 && OBJECT_ROOT_FIELDS.has(k)) continue;
    const field = declared.get(k);
    if (field) collectUnknownFields(field, v, [...path, k], out);
    else if (typeof schema.additionalProperties === 'object') collectUnknownFields(schema.additionalProperties, v, [...path, k], out);
    else if (!open) out.push([...path, k]);
  }
}

/** Turns an Ajv error into a path and a message (undefined for errors that only repeat others). */
function toViolation(error: ErrorObject): SchemaViolation | undefined {
  const path: (string | number)[] = error.instancePath
    .split('/')
    .slice(1)
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((segment) => (/^\d+$/.test(segment) ? Number(segment) : segment));
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return { path: [...path, String(params.missingProperty)], message: 'is required' };
    case 'enum':
      return { path, message: `must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}` };
    case 'format':
      return { path, message: params.format === 'ip' ? 'must be an IP address' : (error.message ?? 'invalid') };
    case 'anyOf': {
      const description = (error.parentSchema as { description?: unknown } | undefined)?.description;
      return { path, message: typeof description === 'string' && description.startsWith('must') ? description : 'does not match any allowed form' };
    }
    case 'if':
      return undefined;
    case 'type':
      return { path, message: `must be ${typeNames(params.type)}, not ${jsonTypeOf(error.data)}` };
    default:
      return { path, message: error.message ?? error.keyword };
  }
}

const JSON_TYPE_NAMES: Record<string, string> = { string: 'a string', number: 'a number', integer: 'an integer', boolean: 'a boolean', object: 'a mapping', array: 'a list', null: 'null' };

/** A JSON Schema `type` (one or several) in words: `an integer`, `a string or null`. */
function typeNames(type: unknown): string {
  const list = (Array.isArray(type) ? type : String(type).split(',')).map(String);
  return list.map((t) => JSON_TYPE_NAMES[t] ?? t).join(' or ');
}

/** What a YAML value is, in the words of {@link typeNames}: `a string`, `a list`… */
function jsonTypeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'number') return Number.isInteger(value) ? 'an integer' : 'a number';
  return JSON_TYPE_NAMES[typeof value] ?? typeof value;
}

function comparePaths(a: FieldPath, b: FieldPath): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] === b[i]) continue;
    if (typeof a[i] === 'number' && typeof b[i] === 'number') return (a[i] as number) - (b[i] as number);
    return String(a[i]) < String(b[i]) ? -1 : 1;
  }
  return a.length - b.length;
}
