import { CST, Composer, Lexer, LineCounter, Parser, isMap, isScalar, isSeq } from 'yaml';
import type { Document, Node as YamlNode } from 'yaml';
import { OBJECT_API_VERSIONS, isNamespacedKind, isObjectKind, addressViolations, isPrintableName, nameViolations, objectKey, printableName } from '../../store/objects.js';
import type { KubeObject, ObjectKind } from '../../store/objects.js';
import { SchemaValidator } from './schemas.js';
import type { FieldPath } from './schemas.js';

/**
 * A problem found in a manifest: where (file, 1-based line), which object (when known), which
 * field (a dotted path with indexes, e.g. `spec.backends[0].weight`, when known) and what.
 * Formatted by {@link formatManifestError}.
 */
export interface ManifestError {
  /** The file as the source names it (the directory given by the user joined with the relative path). */
  file: string;
  /** 1-based line of the offending field, or of the document when the field has no position. */
  line: number;
  kind: string | undefined;
  namespace: string | undefined;
  name: string | undefined;
  field: string | undefined;
  message: string;
}

/** A warning has the same shape as an error; the object it is about is still loaded. */
export type ManifestWarning = ManifestError;

/** A document of a kind Trellis does not read (e.g. StatefulSet, Ingress): skipped. */
export interface IgnoredManifest {
  file: string;
  line: number;
  apiVersion: string | undefined;
  kind: string;
  namespace: string | undefined;
  name: string | undefined;
}

/** The result of {@link parseManifests} for one file. */
export interface ParsedManifests {
  /**
   * The valid objects of the file's documents, in document order. Namespaced objects without
   * `metadata.namespace` get `default` (as kubectl does); `Namespace` objects have none.
   */
  objects: KubeObject[];
  /** `lines[i]` is the 1-based line where `objects[i]`'s document starts. */
  lines: number[];
  /** Documents skipped as invalid (syntax or schema), and duplicates within the file. */
  errors: ManifestError[];
  /** Accepted documents with values YAML 1.1 (kubectl) and YAML 1.2 (Trellis) read differently. */
  warnings: ManifestWarning[];
  /** Documents of kinds not in OBJECT_KINDS. */
  ignored: IgnoredManifest[];
  /** True if at least one document had a YAML syntax error (its content, hence identity, is unknown). */
  syntaxError: boolean;
  /** {@link objectKey}s of documents rejected by validation whose kind, namespace and name are known. */
  rejectedKeys: string[];
}

/**
 * One line of text for a manifest error or warning:
 * `file:line: Kind namespace/name: field: message` (parts that are unknown are left out),
 * e.g. `examples/x/split.yaml:7: TrafficSplit bookstore/bookstore-split: spec.backends[0].weight: must be an integer, not a number`.
 */
export function formatManifestError(error: ManifestError): string {
  let text = `${error.file}:${error.line}: `;
  if (error.kind !== undefined) {
    const shown = (value: string): string => (isPrintableName(value) ? value : printableName(value));
    const name = error.name !== undefined ? shown(error.name) : '<unnamed>';
    text += `${shown(error.kind)} ${error.namespace !== undefined ? `${shown(error.namespace)}/` : ''}${name}: `;
  }
  if (error.field !== undefined) text += `${error.field}: `;
  return text + error.message;
}

/** Formats a field path as `spec.backends[0].weight`. */
export function formatFieldPath(path: FieldPath): string {
  let text = '';
  for (const segment of path) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else text += text === '' ? segment : `.${segment}`;
  }
  return text;
}

let sharedValidator: SchemaValidator | undefined;

/** {@link parseManifestSteps} yields every this many lexical tokens too (a large document's lexing and parsing). */
const LEXEMES_PER_STEP = 1024;

/**
 * How deeply mappings and sequences may nest in a manifest document. Kubernetes objects nest
 * a dozen levels or so; the YAML composer and the validators recurse once per level, so a
 * document nested thousands of levels deep would exhaust the stack.
 */
export const MAX_NESTING_DEPTH = 100;

/**
 * How many YAML nodes one document (a `List` counts as one) may have: its scalars (keys and
 * values), aliases, sequence items, mapping entries and flow collections. The largest
 * example and OSM manifests have a few hundred; a Kubernetes object (at most about 1.5 MB in
 * the API server) far fewer than this. Counted while lexing, before the document's tree is
 * built, so that a small file cannot make the parser build a huge one.
 */
export const MAX_DOCUMENT_NODES = 100_000;

/**
 * How many YAML tokens one document may have, including comments, spaces and line breaks
 * (which the parser keeps too): ten per node of {@link MAX_DOCUMENT_NODES}.
 */
export const MAX_DOCUMENT_TOKENS = 10 * MAX_DOCUMENT_NODES;

/** Lexeme types that start a node (see {@link MAX_DOCUMENT_NODES}). */
const NODE_LEXEMES: ReadonlySet<string> = new Set([
  'scalar',
  'single-quoted-scalar',
  'double-quoted-scalar',
  'block-scalar-header',
  'alias',
  'flow-map-start',
  'flow-seq-start',
  'seq-item-ind',
  'explicit-key-ind',
  'map-value-ind',
]);

/** Lexeme types where a document starts or ends. */
const DOCUMENT_BOUNDARY_LEXEMES: ReadonlySet<string> = new Set(['doc-mode', 'doc-start', 'doc-end']);

/**
 * Parses the text of one manifest file (YAML, possibly multi-document, or JSON; a `v1` `List`
 * is flattened to its items) into store objects.
 *
 * Every document is judged on its own: a document with a YAML syntax error, nested deeper than
 * {@link MAX_NESTING_DEPTH}, larger than {@link MAX_DOCUMENT_NODES} nodes or
 * {@link MAX_DOCUMENT_TOKENS} tokens (counted while lexing: the rest of it is not parsed), a known kind with an unsupported `apiVersion`, a schema violation,
 * a name (or a reference to an object by name) that is not a Kubernetes name
 * (`nameViolations`), a missing `metadata.name`, or the same kind/namespace/name as an earlier
 * document of the file is reported in `errors` and skipped; the file's other documents still
 * load. Documents of kinds Trellis does not read are listed in `ignored`. Pure: no I/O besides
 * reading the bundled CRD schemas once. Runs {@link parseManifestSteps} to its end.
 *
 * @param fileName used in errors only.
 * @param text the file's content.
 */
export function parseManifests(fileName: string, text: string): ParsedManifests {
  const steps = parseManifestSteps(fileName, text);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * {@link parseManifests} one document (or `List` item) at a time: the generator yields after
 * each (and every {@link LEXEMES_PER_STEP} lexical tokens while reading one), and returns the
 * result, so that a caller can give the event loop a turn while parsing a large file. Composing
 * one document's tree from its parsed tokens is the one step that does not yield.
 */
export function* parseManifestSteps(fileName: string, text: string): Generator<void, ParsedManifests, void> {
  sharedValidator ??= new SchemaValidator();
  const validator = sharedValidator;
  const result: ParsedManifests = { objects: [], lines: [], errors: [], warnings: [], ignored: [], syntaxError: false, rejectedKeys: [] };
  const rejectedKeys = new Set<string>();
  const lineCounter = new LineCounter();
  const lineAt = (offset: number): number => lineCounter.linePos(offset).line;
  const seen = new Map<string, number>();
  const composer = new Composer({ prettyErrors: false, merge: true });
  // The composer hands out each document when the next one starts (or at the end); a document
  // too deeply nested or too large is given to it without its content, and reported here.
  const skipped: (SkippedDocument | undefined)[] = [];
  let documentIndex = 0;

  // Parser.parse, a lexeme at a time: lexing and parsing a large document yields too. The
  // nodes and tokens of each document are counted; past a limit, the document read so far is
  // ended and given to the composer without its content, and its remaining lexemes are not
  // parsed (the lexer still finds where the next document starts, for a new parser), so no
  // large tree is ever built; the line counter and the parser's offset are kept in step.
  lineCounter.addNewLine(0);
  let parser = new Parser(lineCounter.addNewLine);
  let lexemes = 0;
  let offset = 0;
  let nodes = 0;
  let tokens = 0;
  let skipping = false;
  for (const lexeme of new Lexer().lex(text)) {
    const type = CST.tokenType(lexeme);
    const boundary = type !== null && DOCUMENT_BOUNDARY_LEXEMES.has(type);
    if (boundary) {
      nodes = 0;
      tokens = 0;
    }
    if (skipping && !boundary) {
      for (let nl = lexeme.indexOf('\n'); nl !== -1; nl = lexeme.indexOf('\n', nl + 1)) lineCounter.addNewLine(offset + nl + 1);
    } else {
      if (skipping) {
        skipping = false;
        parser = new Parser(lineCounter.addNewLine);
        parser.offset = offset;
      }
      for (const token of parser.next(lexeme)) yield* composeToken(token);
      if (type !== null && NODE_LEXEMES.has(type)) nodes++;
      // A scalar's marker is followed by its text: stop after the text, not between them.
      if (type !== 'scalar' && (nodes > MAX_DOCUMENT_NODES || ++tokens > MAX_DOCUMENT_TOKENS)) {
        const tooLarge: SkippedDocument = {
          offset,
          message: nodes > MAX_DOCUMENT_NODES ? `too large: more than ${MAX_DOCUMENT_NODES} YAML nodes (scalars, sequence items, mapping entries); the document is skipped` : `too large: more than ${MAX_DOCUMENT_TOKENS} YAML tokens (including comments and line breaks); the document is skipped`,
        };
        const documents = skipped.length;
        for (const token of parser.end()) yield* composeToken(token, tooLarge);
        if (skipped.length === documents) {
          // Comments and line breaks before the first document: no document to skip.
          result.syntaxError = true;
          result.errors.push({ ...noObject(fileName, lineAt(offset)), message: tooLarge.message.replace('the document is', 'they are') });
        }
        skipping = true;
      }
    }
    if (lexeme !== CST.DOCUMENT && lexeme !== CST.FLOW_END && lexeme !== CST.SCALAR) offset += lexeme.length;
    if (++lexemes % LEXEMES_PER_STEP === 0) yield;
  }
  if (!skipping) for (const token of parser.end()) yield* composeToken(token);
  for (const doc of composer.end()) yield* acceptYamlDocument(doc, skipped[documentIndex++]);
  result.rejectedKeys = [...rejectedKeys];
  return result;

  function* composeToken(token: CST.Token, tooLarge?: SkippedDocument): Generator<void, void, void> {
    let composed = token;
    if (token.type === 'document') {
      let skip = tooLarge;
      if (skip === undefined) {
        const deepAt = offsetBeyondDepth(token, MAX_NESTING_DEPTH);
        if (deepAt !== undefined) skip = { offset: deepAt, message: `too deeply nested: more than ${MAX_NESTING_DEPTH} levels of mappings and sequences; the document is skipped` };
      }
      skipped.push(skip);
      if (skip !== undefined) composed = { ...token, value: undefined };
    }
    for (const doc of composer.next(composed)) yield* acceptYamlDocument(doc, skipped[documentIndex++]);
  }

  function* acceptYamlDocument(doc: Document.Parsed, skip: SkippedDocument | undefined): Generator<void, void, void> {
    const docLine = lineAt(doc.contents?.range[0] ?? doc.range[0]);
    if (skip !== undefined) {
      // Its content, hence its identity, is unknown: like a syntax error.
      result.syntaxError = true;
      result.errors.push({ ...noObject(fileName, lineAt(skip.offset)), message: skip.message });
      yield;
      return;
    }
    if (doc.errors.length > 0) {
      result.syntaxError = true;
      for (const error of doc.errors) {
        result.errors.push({ ...noObject(fileName, lineAt(error.pos[0])), message: `YAML syntax error: ${firstLine(error.message)}` });
      }
      yield;
      return;
    }
    if (doc.contents === null) return; // an empty document (only comments, or a trailing ---)
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (err) {
      result.errors.push({ ...noObject(fileName, docLine), message: `YAML error: ${firstLine((err as Error).message)}` });
      result.syntaxError = true;
      return;
    }
    if (value === null || value === undefined) return;
    if (!isRecord(value)) {
      result.errors.push({ ...noObject(fileName, docLine), message: 'a manifest must be a mapping (apiVersion, kind, metadata, ...)' });
      return;
    }
    if (value.kind === 'List' && Array.isArray(value.items)) {
      for (const [i, item] of value.items.entries()) {
        const basePath = ['items', i];
        acceptDocument(doc, item, basePath, lineOfPath(doc, basePath, lineAt, docLine));
        yield;
      }
    } else {
      acceptDocument(doc, value, [], docLine);
      yield;
    }
  }

  function acceptDocument(doc: Document.Parsed, candidate: unknown, basePath: FieldPath, line: number): void {
    const where = (path: FieldPath): number => lineOfPath(doc, [...basePath, ...path], lineAt, line);
    if (!isRecord(candidate)) {
      result.errors.push({ ...noObject(fileName, line), message: 'a manifest must be a mapping (apiVersion, kind, metadata, ...)' });
      return;
    }
    const kind = candidate.kind;
    const apiVersion = typeof candidate.apiVersion === 'string' ? candidate.apiVersion : undefined;
    const metadata = isRecord(candidate.metadata) ? candidate.metadata : {};
    const name = typeof metadata.name === 'string' ? metadata.name : undefined;
    const givenNamespace = typeof metadata.namespace === 'string' ? metadata.namespace : undefined;
    if (typeof kind !== 'string' || kind === '') {
      result.errors.push({ ...noObject(fileName, where(['kind'])), name, namespace: givenNamespace, field: 'kind', message: 'is required' });
      return;
    }
    if (!isObjectKind(kind)) {
      result.ignored.push({ file: fileName, line, apiVersion, kind, namespace: givenNamespace, name });
      return;
    }
    const namespace = isNamespacedKind(kind) ? (givenNamespace ?? 'default') : undefined;
    const identity = { file: fileName, kind, namespace, name };
    const key = name !== undefined ? objectKey(kind, namespace, name) : undefined;
    const reject = (error: ManifestError): void => {
      result.errors.push(error);
      if (key !== undefined) rejectedKeys.add(key);
    };

    const accepted = OBJECT_API_VERSIONS[kind];
    if (apiVersion === undefined || !accepted.includes(apiVersion)) {
      reject({
        ...identity,
        line: where(['apiVersion']),
        field: 'apiVersion',
        message: apiVersion === undefined ? `is required (${accepted.join(' or ')})` : `${JSON.stringify(apiVersion)} is not supported for ${kind}; use ${accepted.join(' or ')}`,
      });
      return;
    }
    warnAmbiguousScalars(doc, basePath, text, (path, message) => {
      result.warnings.push({ ...identity, line: where(path), field: formatFieldPath(path), message });
    });
    for (const path of validator.unknownFields(kind, apiVersion, candidate)) {
      result.warnings.push({ ...identity, line: where(path), field: formatFieldPath(path), message: `unknown field for ${kind} ${apiVersion}: it is ignored (a typo?)` });
    }
    const addresses = addressViolations(toObject(candidate, kind, namespace));
    // A loopback endpoint address is only a warning: a test bed on one host serves on 127.0.0.0/8 (see addressViolations).
    const endpointLoopback = (a: (typeof addresses)[number]): boolean => a.kind === 'loopback' && kind !== 'Pod';
    for (const a of addresses.filter(endpointLoopback)) {
      result.warnings.push({ ...identity, line: where(a.path), field: formatFieldPath(a.path), message: `${JSON.stringify(a.address)} is a loopback address: the API server refuses it as an endpoint; a proxy sending to it reaches its own host` });
    }
    const violations = [
      ...addresses.filter((a) => !endpointLoopback(a)),
      ...validator.validate(kind, apiVersion, candidate),
      ...nameViolations(toObject(candidate, kind, namespace)),
    ];
    if (violations.length > 0) {
      for (const v of violations) reject({ ...identity, line: where(v.path), field: formatFieldPath(v.path), message: v.message });
      return;
    }
    const objectKeyText = key as string; // the schema requires metadata.name
    const firstLineSeen = seen.get(objectKeyText);
    if (firstLineSeen !== undefined) {
      result.errors.push({ ...identity, line, field: undefined, message: `duplicate object: already defined at line ${firstLineSeen}` });
      return;
    }
    seen.set(objectKeyText, line);
    result.objects.push(toObject(candidate, kind, namespace));
    result.lines.push(line);
  }
}

/** A document given to the composer without its content: where (an offset in the text) and why. */
interface SkippedDocument {
  offset: number;
  message: string;
}

/**
 * The offset of the first node of `document` nested more than `maxDepth` mappings or sequences
 * deep, or undefined if there is none. Walks the CST with a stack of its own (no recursion).
 */
function offsetBeyondDepth(document: CST.Document, maxDepth: number): number | undefined {
  const stack: [CST.Token, number][] = document.value ? [[document.value, 0]] : [];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [token, depth] = next;
    if (token.type !== 'block-map' && token.type !== 'block-seq' && token.type !== 'flow-collection') continue;
    if (depth + 1 > maxDepth) return token.offset;
    for (const item of token.items) {
      if (item.value) stack.push([item.value, depth + 1]);
      if (item.key) stack.push([item.key, depth + 1]);
    }
  }
  return undefined;
}

function toObject(candidate: Record<string, unknown>, kind: ObjectKind, namespace: string | undefined): KubeObject {
  const { namespace: _given, ...metadata } = candidate.metadata as Record<string, unknown>;
  return {
    ...candidate,
    kind,
    apiVersion: candidate.apiVersion as string,
    metadata: { ...metadata, ...(namespace !== undefined ? { namespace } : {}) } as KubeObject['metadata'],
  };
}

function noObject(file: string, line: number): ManifestError {
  return { file, line, kind: undefined, namespace: undefined, name: undefined, field: undefined, message: '' };
}

function firstLine(message: string): string {
  return message.split('\n')[0];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The line of the deepest node along `path` that exists in the document: for a mapping entry
 * the line of its key, for a sequence item the line of the item. Falls back to `fallback`.
 */
function lineOfPath(doc: Document, path: FieldPath, lineAt: (offset: number) => number, fallback: number): number {
  let node: unknown = doc.contents;
  let line = fallback;
  for (const segment of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => (isScalar(p.key) ? p.key.value : p.key) === segment);
      if (!pair) break;
      const keyRange = isScalar(pair.key) ? pair.key.range : undefined;
      if (keyRange) line = lineAt(keyRange[0]);
      node = pair.value;
    } else if (isSeq(node) && typeof segment === 'number') {
      const item = node.items[segment] as YamlNode | undefined;
      if (!item) break;
      if (item.range) line = lineAt(item.range[0]);
      node = item;
    } else {
      break;
    }
  }
  return line;
}

const YAML11_BOOLEANS = /^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$/;
const YAML11_OCTAL = /^[-+]?0[0-7]+$/;
const YAML12_OCTAL = /^0o[0-7]+$/;
const YAML11_SEXAGESIMAL = /^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$/;
const YAML11_UNDERSCORE_NUMBER = /^[-+]?[0-9][0-9_]*_[0-9_]*(\.[0-9_]*)?$/;

/**
 * Calls `warn` for every plain (unquoted) scalar value under `basePath` that YAML 1.1, which
 * kubectl uses, reads differently from YAML 1.2, which Trellis uses (see DESIGN.md, pitfalls).
 */
function warnAmbiguousScalars(doc: Document, basePath: FieldPath, text: string, warn: (path: FieldPath, message: string) => void): void {
  let root: unknown = doc.contents;
  for (const segment of basePath) {
    if (isMap(root)) root = root.items.find((p) => (isScalar(p.key) ? p.key.value : p.key) === segment)?.value;
    else if (isSeq(root) && typeof segment === 'number') root = root.items[segment];
    else return;
  }
  const walk = (node: unknown, path: (string | number)[]): void => {
    if (isMap(node)) {
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? pair.key.value : pair.key;
        walk(pair.value, [...path, typeof key === 'number' ? key : String(key)]);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, i) => walk(item, [...path, i]));
    } else if (isScalar(node) && node.type === 'PLAIN' && node.range) {
      const source = text.slice(node.range[0], node.range[1]).trim();
      const message = ambiguity(source);
      if (message) warn(path, `unquoted ${source} ${message}; quote it or write what you mean`);
    }
  };
  walk(root, []);
}

function ambiguity(source: string): string | undefined {
  if (YAML11_BOOLEANS.test(source)) return 'is a string in YAML 1.2 but a boolean in YAML 1.1 (kubectl)';
  if (YAML11_OCTAL.test(source)) return `is the decimal ${Number(source)} in YAML 1.2 but octal (${parseInt(source, 8)}) in YAML 1.1 (kubectl)`;
  if (YAML12_OCTAL.test(source)) return 'is an octal number in YAML 1.2 but a string in YAML 1.1 (kubectl)';
  if (YAML11_SEXAGESIMAL.test(source)) return 'is a string in YAML 1.2 but a base-60 number in YAML 1.1 (kubectl)';
  if (YAML11_UNDERSCORE_NUMBER.test(source)) return 'is a string in YAML 1.2 but a number in YAML 1.1 (kubectl)';
  return undefined;
}
