/** A generated resource with its xDS resource name, in the object form the codec encodes. */
export interface NamedResource<T extends object = object> {
  readonly name: string;
  readonly resource: T;
}
