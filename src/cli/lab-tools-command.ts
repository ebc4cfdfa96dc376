import { Command, InvalidArgumentError, Option } from 'commander';
import { parseAppListener, startApp, type AppListener } from '../lab/app.js';
import { runTraffic, TRAFFIC_LIMITS } from '../lab/traffic.js';
import { exitOnSignal } from './signals.js';

function integer(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || n < min || n > max) throw new InvalidArgumentError(`"${value}" is not an integer from ${min} to ${max}`);
    return n;
  };
}

function listener(value: string, previous: AppListener[] = []): AppListener[] {
  try {
    return [...previous, parseAppListener(value)];
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

function header(value: string, previous: [string, string][] = []): [string, string][] {
  const i = value.indexOf(':');
  const name = value.slice(0, i).trim();
  if (i <= 0 || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new InvalidArgumentError(`"${value}" is not a header NAME:VALUE`);
  return [...previous, [name, value.slice(i + 1).trim()]];
}

/**
 * Registers `app` and `traffic` under the `lab` command: the lab's echo workload and its load
 * client (see src/lab/app.ts and src/lab/traffic.ts).
 * @param lab the `trellis lab` command.
 */
export function registerLabToolCommands(lab: Command): void {
  lab
    .command('app')
    .description("a lab pod's workload: HTTP JSON echo naming the pod, TCP greeting line then echo, gRPC unary echo")
    .requiredOption('--pod <name>', 'the pod name it answers with')
    .requiredOption('--namespace <ns>', 'the namespace it answers with')
    .option('--service-account <sa>', 'the service account it answers with', 'default')
    .option('--listen <protocol:port>', 'a listener: http:14001, tcp:3306 or grpc:9000 (repeat for several; port 0: any; none: the app only waits for a signal)', listener, [])
    .option('--address <ip>', 'the address every listener binds', '0.0.0.0')
    .option('--fail-first <n>', 'answer the first N HTTP requests with 503', integer(0, 1_000_000_000), 0)
    .option('--status <code>', 'the status of every other HTTP answer', integer(200, 599), 200)
    .action(async (opts: { pod: string; namespace: string; serviceAccount: string; listen: AppListener[]; address: string; failFirst: number; status: number }) => {
      let app: Awaited<ReturnType<typeof startApp>>;
      try {
        app = await startApp({ pod: opts.pod, namespace: opts.namespace, serviceAccount: opts.serviceAccount, listeners: opts.listen, address: opts.address, failFirst: opts.failFirst, status: opts.status });
      } catch (err) {
        process.stderr.write(`trellis lab app: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exit(1);
      }
      process.stdout.write(`listening ${app.bound.map((b) => `${b.protocol}:${b.address}:${b.port}`).join(' ')}\n`);
      // With no listener nothing else keeps the process alive until its signal.
      const alive = setInterval(() => undefined, 1 << 30);
      exitOnSignal(() => {
        clearInterval(alive);
        return app.stop();
      });
    });

  lab
    .command('traffic')
    .description('a load client: sends requests and prints one JSON summary {requests, statuses, answeredBy, errors, durationMs}')
    .addOption(new Option('--url <url>', 'HTTP target, e.g. http://bookstore.bookstore:14001/books-bought').conflicts(['tcp', 'grpc']))
    .addOption(new Option('--tcp <host:port>', 'TCP target: one connection per request, greeting line then one echoed line').conflicts(['grpc']))
    .option('--grpc <host:port>', 'gRPC target: unary trellis.lab.Echo/Echo calls')
    .addOption(new Option('--requests <n>', 'requests to complete').argParser(integer(1, 100_000_000)).conflicts('untilSignal'))
    .option('--until-signal', 'send steadily until SIGTERM or SIGINT, then print the summary', false)
    .option('--method <method>', 'HTTP method', 'GET')
    .option('--header <name:value>', 'an HTTP request header (repeat for several)', header)
    .option('--concurrency <n>', 'requests in flight at once', integer(1, TRAFFIC_LIMITS.maxConcurrency), 1)
    .option('--interval-ms <ms>', 'pause of each worker after each request (default: 0, or 10 with --until-signal)', integer(0, 3_600_000))
    .option('--new-connection-per-request', 'HTTP: one connection per request (Connection: close) instead of kept-alive connections', false)
    .option('--timeout-ms <ms>', 'a request unanswered this long counts as error "timeout"', integer(1, 3_600_000), 5000)
    .action(
      async (opts: {
        url?: string;
        tcp?: string;
        grpc?: string;
        requests?: number;
        untilSignal: boolean;
        method: string;
        header?: [string, string][];
        concurrency: number;
        intervalMs?: number;
        newConnectionPerRequest: boolean;
        timeoutMs: number;
      }) => {
        const controller = new AbortController();
        if (opts.untilSignal) {
          process.once('SIGINT', () => controller.abort());
          process.once('SIGTERM', () => controller.abort());
        }
        try {
          const summary = await runTraffic(
            {
              url: opts.url,
              tcp: opts.tcp,
              grpc: opts.grpc,
              requests: opts.untilSignal ? undefined : opts.requests,
              method: opts.method,
              headers: opts.header ?? [],
              concurrency: opts.concurrency,
              intervalMs: opts.intervalMs ?? (opts.untilSignal ? 10 : 0),
              newConnectionPerRequest: opts.newConnectionPerRequest,
              timeoutMs: opts.timeoutMs,
            },
            opts.untilSignal ? controller.signal : undefined,
          );
          process.stdout.write(`${JSON.stringify(summary)}\n`);
        } catch (err) {
          process.stderr.write(`trellis lab traffic: ${err instanceof Error ? err.message : String(err)}\n`);
          process.exitCode = 2;
        }
      },
    );
}
