/**
 * The value `map` holds for `key`, first set to `make()` when it holds none.
 * Works on a `Map` or a `WeakMap` (anything with `get` and `set`).
 */
export function getOrCreate<K, V>(map: { get(key: K): V | undefined; set(key: K, value: V): unknown }, key: K, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    map.set(key, value);
  }
  return value;
}
