/**
 * `trellis validate DIR` (like `istioctl analyze`): everything a controller started on a
 * manifests directory would report — manifest errors, unknown-field and other warnings, policy
 * problems, and configuration that breaks Envoy's rules (every identity's sidecar and proxyless
 * configuration generated and checked as the controller does before sending) — without
 * starting one: no state directory, no listener, no network.
 */
import { Command, Option } from 'commander';
import { formatProblem, type PolicyProblem } from '../catalog/problems.js';
import { CertificateAuthority } from '../certificate/authority.js';
import { CertificateManager } from '../certificate/manager.js';
import { generateConfiguration, type ConfigurationCertificates } from '../controller/configuration.js';
import { meshIdentitiesOf } from '../controller/mesh-controller.js';
import { warmUpProxy } from '../controller/warm-up.js';
import { GenerationContext } from '../envoy/context.js';
import { formatViolation, ResourceCheckCache, type Violation } from '../envoy/validate/index.js';
import { defaultControllerNamespace } from '../main.js';
import { loadMeshDirectory, type MeshDirectory } from '../offline/mesh-directory.js';
import type { Proxy, ServiceIdentity, XdsClientType } from '../proxy/types.js';
import { formatManifestError, type ManifestError } from '../sources/manifests/parse.js';
import { compareStrings } from '../util/order.js';

/** Exit status of `trellis validate`: clean (or warnings only without `--strict`). */
export const VALIDATE_CLEAN = 0;
/** Exit status of `trellis validate`: errors found (or warnings with `--strict`). */
export const VALIDATE_FOUND = 1;
/** Exit status of `trellis validate`: a usage error, or a directory that cannot be read. */
export const VALIDATE_USAGE = 2;

/**
 * One thing `trellis validate` found. `category` says which part of the controller reports it:
 * `manifest` (the manifests source: a document rejected, a syntax error, an unreadable file, a
 * duplicate; or, as a warning, an unknown field, an ambiguous scalar, a loopback endpoint),
 * `policy` (the snapshot builder: a policy skipped, `trellis_policy_problems`), `configuration`
 * (the generated configuration of one identity breaks a `validate.rules` or cross-resource rule,
 * `trellis_config_validation_failures_total`: the controller would not send it).
 */
export interface Finding {
  readonly severity: 'error' | 'warning';
  readonly category: 'manifest' | 'policy' | 'configuration';
  /** The line printed: the controller's own format (`file:line: Kind ns/name: field: message`). */
  readonly text: string;
  readonly file?: string;
  readonly line?: number;
  readonly kind?: string;
  readonly namespace?: string;
  readonly name?: string;
  readonly field?: string;
  readonly message: string;
  /** `configuration`: the identity (`<ns>/<sa>`) and client type whose configuration breaks the rule. */
  readonly identity?: string;
  readonly clientType?: XdsClientType;
  /** `configuration`: the violation (type URL, resource name, path, rule), as `/debug/policies` shows it. */
  readonly violation?: Violation;
}

/** What {@link validateDirectory} found in a directory. */
export interface ValidationReport {
  readonly dir: string;
  readonly meshName: string;
  /** Manifest errors and warnings (in file order), policy problems, then configuration violations by identity. */
  readonly findings: readonly Finding[];
  readonly errors: number;
  readonly warnings: number;
  /** The identities whose sidecar and proxyless configurations were generated and checked. */
  readonly identities: number;
}

/** Options of {@link validateDirectory} (those of `loadMeshDirectory`). */
export interface ValidateOptions {
  readonly dir: string;
  readonly meshName: string;
  /** The controller's namespace (whose `osm-mesh-config` is read). */
  readonly controllerNamespace: string;
  readonly maxFileBytes?: number;
  readonly maxTotalBytes?: number;
}

/**
 * Loads `dir` as the controller does (`loadMeshDirectory`), then generates the configuration of
 * a verified sidecar and of a proxyless gRPC client of every identity of the mesh (the
 * controller's `generateConfiguration`, with service certificates from a CA made in memory)
 * and collects every rule they break.
 * @throws Error naming the directory when it cannot be read (see `loadMeshDirectory`).
 */
export async function validateDirectory(options: ValidateOptions): Promise<ValidationReport> {
  const mesh = await loadMeshDirectory(options);
  const findings: Finding[] = [
    ...mesh.manifestErrors.map((e) => manifestFinding('error', e)),
    ...mesh.manifestWarnings.map((w) => manifestFinding('warning', w)),
    ...mesh.problems.map((p) => policyFinding(mesh, p)),
  ];
  const identities = [...meshIdentitiesOf(mesh.snapshot, mesh.store)].sort(compareStrings);
  findings.push(...(await configurationFindings(mesh, identities)));
  const errors = findings.filter((f) => f.severity === 'error').length;
  return { dir: options.dir, meshName: options.meshName, findings, errors, warnings: findings.length - errors, identities: identities.length };
}

function manifestFinding(severity: Finding['severity'], e: ManifestError): Finding {
  const text = formatManifestError(e);
  return { ...definedOnly(e), severity, category: 'manifest', text: severity === 'warning' ? `warning: ${text}` : text, message: e.message };
}

/** A policy problem as the controller logs it, after the file and line of the object's document. */
function policyFinding(mesh: MeshDirectory, p: PolicyProblem): Finding {
  const at = mesh.locate(p.kind, p.namespace, p.name);
  const severity = p.severity ?? 'error';
  const text = `${severity === 'warning' ? 'warning: ' : ''}${at ? `${at.file}:${at.line}: ` : ''}${formatProblem(p)}`;
  return { ...(at ?? {}), ...definedOnly(p), severity, category: 'policy', text, message: p.message };
}

/** `o` without its undefined members (so that the JSON output has none). */
function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The violations of every identity's sidecar and proxyless configuration, as the controller checks them before sending. */
async function configurationFindings(mesh: MeshDirectory, identities: readonly ServiceIdentity[]): Promise<Finding[]> {
  const ca = await CertificateAuthority.generate();
  const certificates = new CertificateManager({ ca, validitySeconds: mesh.snapshot.settings.serviceCertValiditySeconds });
  const context = new GenerationContext(mesh.snapshot);
  const cache = new ResourceCheckCache();
  const findings: Finding[] = [];
  try {
    for (const identity of identities) {
      const cert = await certificates.getServiceCertificate(identity);
      const sidecar = warmUpProxy(identity);
      findings.push(...check(context, cache, sidecar, { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem: certificates.caPem }));
      // A proxyless client has no SDS: the mesh root alone, as the controller gives it.
      findings.push(...check(context, cache, { ...sidecar, clientType: 'grpc' }, { caPem: certificates.caPem }));
    }
  } finally {
    certificates.stop();
  }
  return findings;
}

/** How a client type is named in the findings. */
const CLIENT_NAMES: Readonly<Record<XdsClientType, string>> = { envoy: 'sidecar', grpc: 'proxyless gRPC' };

function check(context: GenerationContext, cache: ResourceCheckCache, proxy: Proxy, certs: ConfigurationCertificates): Finding[] {
  const clientType = proxy.clientType ?? 'envoy';
  const about = `${proxy.identity} (${CLIENT_NAMES[clientType]})`;
  const base = { severity: 'error', category: 'configuration', identity: proxy.identity, clientType } as const;
  try {
    const { violations } = generateConfiguration(context, proxy, certs, cache);
    return violations.map((v) => {
      const message = formatViolation(v);
      return { ...base, text: `${about}: invalid configuration not sent: ${message}`, message, violation: v };
    });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return [{ ...base, text: `${about}: configuration cannot be generated: ${message}`, message }];
  }
}

/** The text output: one line per finding, then a summary line. */
export function formatValidationText(report: ValidationReport): string {
  const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
  const lines = report.findings.map((f) => f.text);
  const verdict = report.errors === 0 && report.warnings === 0 ? 'no problems found' : `${plural(report.errors, 'error')}, ${plural(report.warnings, 'warning')}`;
  const identities = `${report.identities} ${report.identities === 1 ? 'identity' : 'identities'}`;
  lines.push(`${report.dir}: ${verdict} (mesh ${report.meshName}; ${identities}: sidecar and proxyless configurations checked)`);
  return `${lines.join('\n')}\n`;
}

/** The exit status for `report`: {@link VALIDATE_FOUND} on errors, or on warnings when `strict`; else {@link VALIDATE_CLEAN}. */
export function validateExitCode(report: ValidationReport, strict: boolean): number {
  return report.errors > 0 || (strict && report.warnings > 0) ? VALIDATE_FOUND : VALIDATE_CLEAN;
}

/** Adds `trellis validate DIR` to `program` (usage errors exit {@link VALIDATE_USAGE}). */
export function registerValidateCommands(program: Command): void {
  program
    .command('validate')
    .argument('<dir>', 'the manifests directory, as trellis controller --manifests reads it')
    .description('check a manifests directory without starting a controller: manifest errors, unknown fields, policy problems, and every identity\'s generated configuration against Envoy\'s rules (exit 0 clean or warnings only, 1 errors, 2 usage or unreadable directory)')
    .option('--mesh-name <name>', 'mesh name: namespaces labelled openservicemesh.io/monitored-by=<name> are in the mesh', 'osm')
    .option('--controller-namespace <ns>', "the controller's namespace, whose osm-mesh-config MeshConfig is read ($POD_NAMESPACE, else osm-system)", defaultControllerNamespace())
    .addOption(new Option('--output <format>', 'text: one line per finding and a summary; json: the report').choices(['text', 'json']).default('text'))
    .option('--strict', 'exit 1 on warnings too', false)
    .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : VALIDATE_USAGE))
    .action(async (dir: string, opts: { meshName: string; controllerNamespace: string; output: 'text' | 'json'; strict: boolean }) => {
      let report: ValidationReport;
      try {
        report = await validateDirectory({ dir, meshName: opts.meshName, controllerNamespace: opts.controllerNamespace });
      } catch (err) {
        process.stderr.write(`trellis validate: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = VALIDATE_USAGE;
        return;
      }
      process.stdout.write(opts.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatValidationText(report));
      process.exitCode = validateExitCode(report, opts.strict);
    });
}
