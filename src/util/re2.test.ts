import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compileRe2, re2Problem, type Re2 } from './re2.js';

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
