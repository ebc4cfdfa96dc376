/** Loopback ports for tests. */
import net from 'node:net';

/**
 * A port free now on 127.0.0.1: bound to port 0, then closed, so nothing listens there once this
 * resolves (a client gets connection refused; a server of the test may take it).
 */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
