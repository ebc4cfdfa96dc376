/**
 * Encoding and `validate.rules` checks of generated resources, kept per resource object and
 * shared across proxies and pushes (see {@link ResourceCheckCache}). A resource given as parts
 * (`NamedResource.parts`) is encoded and checked part by part, and its bytes are the parts'
 * encodings joined by `joinEncodedParts` (`src/api/codec.ts`, the one place that joins them).
 *
 * Pure: no I/O; everything it remembers is in the instance the caller owns.
 */
import { AnyMemo, encodeChecked, encodeMessage, joinEncodedParts } from '../../api/codec.js';
import { TYPE_SHORT_NAME, TypeUrl, type ResourceName } from '../../api/type-urls.js';
import { getOrCreate } from '../../util/maps.js';
import { validLike, type KnownValidMessages } from './alike.js';
import type { ResourceLayer } from '../context.js';
import type { NamedResource } from '../resource.js';
import { ResourceFactsCache, servedAsNamed, type ResourceFacts, type ResourceReference } from './cross-resource.js';
import { PgvRules, validateMessage, validateMessagePart, type RuleViolation } from './pgv-rules.js';

/** What {@link ResourceCheckCache} remembers of one resource: its wire bytes, or why it has none, and its rule violations. */
export interface CheckedResource {
  /** The encoded message; undefined when it could not be encoded. */
  readonly encoded: Buffer | undefined;
  /** The encoding error, when there is one. */
  readonly error: string | undefined;
  /** Violations of the protos' `validate.rules` (checked on the decoded wire form). */
  readonly violations: readonly RuleViolation[];
}

/**
 * What the checks of a {@link ResourceLayer} found, once for every proxy given it: whether its
 * resources break no rule on their own (encoding, `validate.rules`, name, single-resource
 * cross-resource rules, no name twice), and the names they refer to, by type.
 */
export interface LayerCheck {
  readonly valid: boolean;
  readonly references: ReadonlyMap<TypeUrl, readonly ResourceReference[]>;
  /** Every reference of {@link references}. */
  readonly all: readonly ResourceReference[];
}

/** How many unlike resources of one type are kept to compare new ones with. */
const SIBLINGS_PER_TYPE = 4;

/** A resource or part checked before, with its result: what the next alike one is compared with. */
interface Sibling {
  readonly object: object;
  readonly result: CheckedResource;
}

/**
 * Per-resource results (encoding and `validate.rules` checks), shared across proxies and
 * pushes. A resource is looked up, cheapest first:
 * 1. by object: the same object checked before (generated objects are not mutated afterwards);
 * 2. by sibling: when the last valid resource of the same type and name (another proxy's
 *    listener of that name, or the same resource of the last push), or one of the last few
 *    valid ones of the same type that were not alike one another (another proxy's certificate
 *    secret), is alike this one (`validLike`), this one is valid too and is only encoded;
 * 3. otherwise it is encoded and checked in full.
 * There is no lookup by content: a JSON key cannot tell `undefined`, NaN and ±Infinity from
 * absent or null, and costs about as much as encoding what it would find.
 */
export class ResourceCheckCache {
  /** The protos' `validate.rules` as read so far (by field and message type). */
  readonly pgv = new PgvRules();
  /** What the cross-resource rules found in each resource object (`validateProxyResources` reads it). */
  readonly facts = new ResourceFactsCache();
  private readonly byObject = new WeakMap<object, CheckedResource>();
  /** The same for objects checked as a part after the first (fewer rules apply to those). */
  private readonly byPartObject = new WeakMap<object, CheckedResource>();
  /** By base part: the valid part last checked at each later position. */
  private readonly siblingsByBase = new WeakMap<object, Sibling[]>();
  /** By type URL: the valid part last checked at each later position, after any base. */
  private readonly siblingsByPosition = new Map<TypeUrl, Sibling[]>();
  /** By type URL and name: the valid resource last checked. */
  private readonly siblingsByName = new Map<string, Sibling>();
  /** By type URL: the last few valid resources checked that were not alike one another, latest first. */
  private readonly siblingsByType = new Map<TypeUrl, Sibling[]>();
  private checkedInFull = 0;
  private readonly layerChecks = new WeakMap<ResourceLayer, LayerCheck>();
  private readonly referencesByMaker = new WeakMap<object, ReadonlyMap<TypeUrl, readonly ResourceReference[]>>();
  /** By what makes them (a resource object, a layer), then the layer resolving them, then type: the references the layer lacks. */
  private readonly unresolvedByMaker = new WeakMap<object, WeakMap<object, Map<TypeUrl, readonly ResourceReference[]>>>();
  /** The `Any` values (typed configs) converted so far, by object: one shared by many resources, or carried over from a push before, is encoded once. */
  private readonly anyMemo = new AnyMemo();
  /** Nested messages found alike valid ones (`validLike`): one carried over, or shared, is taken as valid without a walk. */
  private readonly knownValid: KnownValidMessages = new WeakMap();
  private readonly encodedLayers = new WeakMap<ResourceLayer, readonly EncodedResource[]>();
  private readonly fetchedByObject = new WeakMap<object, readonly ResourceName[]>();

  /** @param maxNames how many names to keep a sibling for, the least recently checked going first (default 20 000). */
  constructor(private readonly maxNames = 20_000) {}

  /**
   * Encodes and checks `resource` of `typeUrl` (named `name`), or returns the result for the
   * same object, or for an alike sibling. With `parts` (see `NamedResource.parts`), each part is
   * encoded and checked on its own (the first, the base, as a whole resource of that name; the
   * others for the fields they set) and the encodings are concatenated: a part shared by many
   * resources costs once, and a part alike the one last seen at its position (after the same
   * base, else after any) is only encoded.
   */
  check(typeUrl: TypeUrl, resource: object, parts?: readonly object[], name?: string): CheckedResource {
    const seen = this.byObject.get(resource);
    if (seen) return seen;
    const result = parts && parts.length > 0 ? this.checkParts(typeUrl, parts, name) : this.checkWhole(typeUrl, resource, name);
    this.byObject.set(resource, result);
    return result;
  }

  /**
   * Checks one generated resource of `typeUrl` on its own, as `validateProxyResources` does:
   * encoding, `validate.rules`, its name field, the single-resource cross-resource rules.
   * @returns its facts (what it refers to) when it breaks none of these; undefined otherwise.
   */
  checkAlone(typeUrl: TypeUrl, r: NamedResource): ResourceFacts | undefined {
    const checked = this.check(typeUrl, r.resource, r.parts, r.name);
    if (checked.error !== undefined || checked.violations.length > 0) return undefined;
    const decoded = r.resource as Record<string, unknown>;
    if (!servedAsNamed(typeUrl, decoded, r.name)) return undefined;
    const facts = this.factsOf(typeUrl, r);
    return facts.violations.length > 0 ? undefined : facts;
  }

  /** {@link LayerCheck} of `layer`, resources of `typeUrl`: found once per layer object. */
  checkLayer(typeUrl: TypeUrl, layer: ResourceLayer): LayerCheck {
    let found = this.layerChecks.get(layer);
    if (!found) {
      const references = new Map<TypeUrl, ResourceReference[]>();
      let valid = layer.names.size === layer.resources.length;
      for (const r of layer.resources) {
        const facts = valid ? this.checkAlone(typeUrl, r) : undefined;
        if (!facts) {
          valid = false;
          break;
        }
        for (const ref of facts.references) getOrCreate(references, ref.typeUrl, () => []).push(ref);
      }
      found = { valid, references: valid ? references : new Map(), all: valid ? [...references.values()].flat() : [] };
      this.layerChecks.set(layer, found);
    }
    return found;
  }

  /** `references` (all those made by `maker`: a resource object, or a layer) by type: grouped once per maker. */
  referencesByType(maker: object, references: readonly ResourceReference[]): ReadonlyMap<TypeUrl, readonly ResourceReference[]> {
    let found = this.referencesByMaker.get(maker);
    if (!found) {
      const byType = new Map<TypeUrl, ResourceReference[]>();
      for (const ref of references) getOrCreate(byType, ref.typeUrl, () => []).push(ref);
      this.referencesByMaker.set(maker, (found = byType));
    }
    return found;
  }

  /**
   * Of `references` (all those made by `maker`: a resource object, or a layer), those of type
   * `typeUrl` that name nothing in `resolving` (names of `typeUrl` many proxies have, kept as one
   * object: a layer's names): found once per maker, type and names, so a resource or layer many
   * proxies get resolves against a layer once.
   */
  unresolvedReferences(maker: object, references: readonly ResourceReference[], typeUrl: TypeUrl, resolving: { has(name: string): boolean }): readonly ResourceReference[] {
    let byResolving = this.unresolvedByMaker.get(maker);
    if (!byResolving) this.unresolvedByMaker.set(maker, (byResolving = new WeakMap()));
    let byType = byResolving.get(resolving);
    if (!byType) byResolving.set(resolving, (byType = new Map()));
    let found = byType.get(typeUrl);
    if (!found) {
      found = references.filter((ref) => ref.typeUrl === typeUrl && !resolving.has(ref.name));
      byType.set(typeUrl, found);
    }
    return found;
  }

  /**
   * The encodings of `layer`'s resources (of `typeUrl`), as a snapshot takes them: one array
   * per layer object (so a snapshot's shared map can be made once for it).
   * @throws Error naming the resource when one cannot be encoded.
   */
  encodeLayer(typeUrl: TypeUrl, layer: ResourceLayer): readonly EncodedResource[] {
    let found = this.encodedLayers.get(layer);
    if (!found) {
      found = layer.resources.map((r) => this.encode(typeUrl, r));
      this.encodedLayers.set(layer, found);
    }
    return found;
  }

  /**
   * `r` (of `typeUrl`) encoded as a snapshot takes it: its name, its bytes, and, of a Listener or
   * Cluster, what it makes its client fetch ({@link fetchedNames}).
   * @throws Error naming the resource when it cannot be encoded.
   */
  encode(typeUrl: TypeUrl, r: NamedResource): EncodedResource {
    const { encoded, error } = this.check(typeUrl, r.resource, r.parts, r.name);
    if (!encoded) throw new Error(`${TYPE_SHORT_NAME[typeUrl]} resource "${r.name}": ${error}`);
    const references = this.fetchedNames(typeUrl, r);
    return references === undefined ? { name: r.name, resource: { type_url: typeUrl, value: encoded } } : { name: r.name, resource: { type_url: typeUrl, value: encoded }, references };
  }

  /**
   * Of a Listener or Cluster (undefined for other types): the resources of other types it makes
   * its client fetch over ADS, from its cross-resource facts (RDS route configurations, the
   * ClusterLoadAssignment of an EDS cluster, SDS secrets; not the clusters a listener routes
   * to, which the client holds through CDS), each once. Found once per resource object.
   */
  fetchedNames(typeUrl: TypeUrl, r: NamedResource): readonly ResourceName[] | undefined {
    if (typeUrl !== TypeUrl.Listener && typeUrl !== TypeUrl.Cluster) return undefined;
    let found = this.fetchedByObject.get(r.resource);
    if (!found) {
      const facts = this.factsOf(typeUrl, r);
      const names = new Map<string, ResourceName>();
      for (const ref of facts.references) if (ref.typeUrl !== TypeUrl.Cluster) names.set(`${ref.typeUrl} ${ref.name}`, { typeUrl: ref.typeUrl, name: ref.name });
      found = Object.freeze([...names.values()]);
      this.fetchedByObject.set(r.resource, found);
    }
    return found;
  }

  /** How many typed configs (`Any` values) were converted and encoded (not found encoded before, by object). */
  get typedConfigsEncoded(): number {
    return this.anyMemo.converted;
  }

  /** How many resources and parts were encoded and checked in full (not by object or sibling). */
  get fullChecks(): number {
    return this.checkedInFull;
  }

  /** The cross-resource facts of `r`: of its parts when it is given as parts, else of the whole. */
  private factsOf(typeUrl: TypeUrl, r: NamedResource): ResourceFacts {
    return r.parts && r.parts.length > 0 ? this.facts.ofParts(typeUrl, r.parts as Record<string, unknown>[]) : this.facts.of(typeUrl, r.resource as Record<string, unknown>);
  }

  private checkParts(typeUrl: TypeUrl, parts: readonly object[], name: string | undefined): CheckedResource {
    const siblings = getOrCreate(this.siblingsByBase, parts[0], () => []);
    const anyBase = getOrCreate(this.siblingsByPosition, typeUrl, () => []);
    const results = parts.map((part, i) => (i === 0 ? this.check(typeUrl, part, undefined, name) : this.checkPart(typeUrl, part, i, siblings, anyBase)));
    const failed = results.find((r) => r.encoded === undefined);
    if (failed) return failed;
    return {
      encoded: joinEncodedParts(results.map((r) => r.encoded!)),
      error: undefined,
      violations: results.flatMap((r) => r.violations),
    };
  }

  /**
   * A part after the base, compared with the part last checked at its position after the same
   * base (another proxy's TLS context towards the same service), else after any base (towards
   * another service: a new push's bases are new objects).
   */
  private checkPart(typeUrl: TypeUrl, part: object, position: number, siblings: Sibling[], anyBase: Sibling[]): CheckedResource {
    const seen = this.byPartObject.get(part);
    if (seen) return seen;
    const result = this.likeSibling(typeUrl, part, siblings[position]) ?? this.likeSibling(typeUrl, part, anyBase[position]) ?? this.checkInFull(typeUrl, part, true);
    this.byPartObject.set(part, result);
    if (isValid(result)) siblings[position] = anyBase[position] = { object: part, result };
    return result;
  }

  /** A whole resource (or a base part). */
  private checkWhole(typeUrl: TypeUrl, resource: object, name: string | undefined): CheckedResource {
    const nameKey = name === undefined ? undefined : resourceKey(typeUrl, name);
    const ofType = getOrCreate(this.siblingsByType, typeUrl, () => []);
    const named = nameKey === undefined ? undefined : this.siblingsByName.get(nameKey);
    let result = this.likeSibling(typeUrl, resource, named);
    // The sibling this one replaces in `ofType`: the one it was alike, or none (a new kind).
    let alike = result ? ofType.findIndex((s) => s.object === named!.object) : -1;
    for (let i = 0; result === undefined && i < ofType.length; i++) {
      result = this.likeSibling(typeUrl, resource, ofType[i]);
      if (result) alike = i;
    }
    result ??= this.checkInFull(typeUrl, resource, false);
    if (!isValid(result)) return result; // only a valid resource can stand for others
    const sibling = { object: resource, result };
    if (nameKey !== undefined) {
      this.siblingsByName.delete(nameKey);
      this.siblingsByName.set(nameKey, sibling);
      if (this.siblingsByName.size > this.maxNames) this.siblingsByName.delete(this.siblingsByName.keys().next().value!);
    }
    if (alike >= 0) ofType.splice(alike, 1);
    ofType.unshift(sibling);
    if (ofType.length > SIBLINGS_PER_TYPE) ofType.pop();
    return result;
  }

  private checkInFull(typeUrl: TypeUrl, resource: object, part: boolean): CheckedResource {
    this.checkedInFull++;
    return attempt(() => {
      const { encoded, decoded } = encodeChecked(typeUrl, resource, this.anyMemo);
      return { encoded, error: undefined, violations: part ? validateMessagePart(typeUrl, decoded, this.pgv) : validateMessage(typeUrl, decoded, this.pgv) };
    });
  }

  /**
   * `object`'s result when `sibling` was encoded, broke no rule and is alike (`validLike`): the
   * encoding of `object` (or its encoding error), with no violations. Undefined otherwise.
   */
  private likeSibling(typeUrl: TypeUrl, object: object, sibling: Sibling | undefined): CheckedResource | undefined {
    if (!sibling || !isValid(sibling.result) || !validLike(typeUrl, sibling.object, object, this.pgv, this.knownValid)) return undefined;
    return attempt(() => ({ encoded: encodeMessage(typeUrl, object, true, this.anyMemo), error: undefined, violations: [] }));
  }
}

/** A resource as a snapshot takes it (`src/xds/cache`'s `NamedResource`). */
export interface EncodedResource {
  readonly name: string;
  readonly resource: { readonly type_url: string; readonly value: Buffer };
  /** Of a Listener or Cluster: what it makes its client fetch ({@link ResourceCheckCache.fetchedNames}). */
  readonly references?: readonly ResourceName[];
}

/** Encoded, and no rule broken. */
function isValid(result: CheckedResource): boolean {
  return result.encoded !== undefined && result.violations.length === 0;
}

/** `check()`'s result, or the encoding error it threw as a result without bytes. */
function attempt(check: () => CheckedResource): CheckedResource {
  try {
    return check();
  } catch (err) {
    return { encoded: undefined, error: err instanceof Error ? err.message : String(err), violations: [] };
  }
}

/** One string per resource of `typeUrl` named `name` (a map key). */
export function resourceKey(typeUrl: TypeUrl, name: string): string {
  return `${typeUrl}\n${name}`;
}
