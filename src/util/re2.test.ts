import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compileRe2, estimateRe2ProgramSize, MAX_RE2_PROGRAM_SIZE, re2Problem, type Re2 } from './re2.js';

describe('re2Problem (RE2 itself, as Envoy compiles safe_regex)', () => {
  const rejected: readonly [string, RegExp][] = [
    ['x{1001}', /"x\{1001\}" is not a valid RE2 regular expression: invalid repetition size: \{1001\}/],
    ['\\Z', /is not a valid RE2 regular expression: invalid escape sequence: \\Z/],
    ['(?P<n>a)\\k<n>', /invalid escape sequence: \\k.*\(RE2 has no lookaround or backreference\)/],
    ['/books(?=-bought)', /invalid perl operator: \(\?=.*no lookaround/],
    ['a(', /missing \)/],
  ];
  for (const [pattern, message] of rejected) {
    it(`rejects ${pattern} with RE2's reason`, () => {
      assert.match(re2Problem(pattern) ?? 'accepted', message);
    });
  }

  for (const pattern of ['(?i)abc', '^/api/.*$', '\\d+', 'x{1000}', '\\z', '(?P<n>a)', '[[:alpha:]]+', '\\pL', '/books-bought']) {
    it(`accepts ${pattern}`, () => assert.equal(re2Problem(pattern), undefined));
  }

  it('rejects the empty pattern', () => assert.equal(re2Problem(''), 'is an empty regular expression'));
});

describe('compileRe2', () => {
  it('matches with RE2 semantics: test searches, fullMatch anchors the whole input', () => {
    const re = compileRe2('(?i)/api/v[0-9]+') as Re2;
    assert.ok(re.test('/x/API/v2/y'));
    assert.ok(!re.fullMatch('/x/API/v2/y'));
    assert.ok(re.fullMatch('/API/v12'));
    assert.ok((compileRe2('a|ab') as Re2).fullMatch('ab'), 'a full match is not the first alternative only');
    assert.ok((compileRe2('\\pL+') as Re2).fullMatch('héllo'));
  });

  it('returns the same compiled pattern twice and an Error for an invalid one', () => {
    assert.equal(compileRe2('^/same$'), compileRe2('^/same$'));
    assert.ok(compileRe2('x{1001}') instanceof Error);
  });
});

describe('estimateRe2ProgramSize (Envoy re2.max_program_size)', () => {
  // Program sizes Envoy 1.40.0 reported for these patterns ("RE2 program size of N > max
  // program size of 1", runtime re2.max_program_size.error_level: 1).
  const envoySizes: readonly [string, number][] = [
    ['a', 5], ['abc', 7], ['\\pL', 11], ['\\pL{10}', 74], ['[\\pL\\pN]', 14], ['\\d', 5], ['\\w', 7], ['.', 6],
    ['(?s).', 5], ['(?i)abcdefghij', 14], ['\\PL', 12], ['[^a]', 6], ['a|b|c', 5], ['(a|b)*', 7], ['a{0,10}', 24],
    ['a{2,}', 7], ['/buy-a-book/[a-z0-9]{1,120}', 375], ['a{100}', 104], ['[a-z]{100}', 104], ['.{100}', 204],
    ['\\w{50}', 154], ['(ab|cd|ef){30}', 244], ['[^/]{100}', 204], ['\\S{50}', 204], ['(?i)[a-z]{10}', 14],
    ['[^a-z]{10}', 24], ['[[:^alpha:]]{10}', 34], ['\\W{10}', 54], ['[^\\pL]{10}', 84], ['[é-ü]{10}', 14],
    ['(?i)[^k]{10}', 34], ['\\C{10}', 14], ['[\\d\\s\\w]{10}', 64], ['(?U)a+b*', 8],
  ];
  for (const [pattern, size] of envoySizes) {
    it(`estimates ${pattern} at ${size} instructions or more`, () => assert.ok(estimateRe2ProgramSize(pattern) >= size));
  }

  it('accepts a pattern over Envoy\'s default limit of 100 that the bootstraps\' limit allows', () => {
    assert.equal(re2Problem('/buy-a-book/[a-z0-9]{1,120}'), undefined);
  });

  it('refuses, without compiling, patterns whose program outgrows the limit (one of them exhausts re2-wasm\'s heap)', () => {
    for (const pattern of ['[a-z0-9]{1,1000}'.repeat(40), '(\\pL|\\pN){1000}'.repeat(10), '(a{1000}){1000}x']) {
      assert.match(re2Problem(pattern) ?? 'accepted', new RegExp(`is too large: its RE2 program is estimated at \\d+ instructions, over the ${MAX_RE2_PROGRAM_SIZE}`));
    }
    // RE2 still works afterwards.
    assert.equal(re2Problem('^/api/.*$'), undefined);
    assert.match(re2Problem('x{1001}') ?? 'accepted', /invalid repetition size/);
  });

  it('checks Unicode classes alone, so that repeating one neither exhausts re2-wasm nor takes seconds', () => {
    // \p{L}{100} made re2-wasm abort (out of its 16 MiB heap), and then every later check threw.
    for (const pattern of ['\\p{L}{100}', '/users/[\\p{L}\\p{N}_-]{1,64}', '[\\pL-z]', '\\p{^Greek}+', 'a\\Q\\pZ\\E']) {
      assert.equal(re2Problem(pattern), undefined, pattern);
    }
    assert.match(re2Problem('\\p{Foo}x') ?? 'accepted', /invalid character class range: \\p\{Foo\}/);
    assert.match(re2Problem('\\p{L}{1000}') ?? 'accepted', /is too large/);
    assert.match(re2Problem('.{1000}') ?? 'accepted', /is too large/);
    assert.equal(re2Problem('\\d+'), undefined);
  });
});
