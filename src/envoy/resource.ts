/** A generated resource with its xDS resource name, in the object form the codec encodes. */
export interface NamedResource<T extends object = object> {
  readonly name: string;
  readonly resource: T;
  /**
   * `resource` split into messages of its own type that set disjoint fields (and share no
   * oneof), the first the base: `resource` is their union. Encoded one by one and
   * concatenated, they are `resource` on the wire (protobuf: concatenated encodings of one
   * message type parse as their merge; with disjoint fields, exactly the union). A part many
   * proxies get (the same object) is encoded and checked once.
   */
  readonly parts?: readonly Partial<T>[];
}
