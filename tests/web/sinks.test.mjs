// Where the dashboard's code could turn text into markup, read from its
// source (node:test, no browser): the rules of web/js/dom.js, held for every
// file under web/js/ and for web/index.html.
//   * innerHTML, outerHTML, insertAdjacentHTML, document.write(ln),
//     createContextualFragment, DOMParser, srcdoc, eval and new Function
//     appear only in dom.js's setHtml (innerHTML) and nowhere else;
//   * no string or untagged template literal holds markup (`<tag`, `</`,
//     `<!`): markup is written in html`` only, which escapes what it is given.
//     A string with markup goes into innerHTML somewhere as it is, e.g. from
//     an ECharts tooltip formatter, which is how a device name once ran
//     script in the page;
//   * index.html has no inline script or on* handler, and its
//     Content-Security-Policy allows scripts from the dashboard's own origin
//     only (no 'unsafe-inline', no 'unsafe-eval').
// Strings and templates are found by a small JavaScript tokenizer (strings,
// templates with nested ${}, comments, regular expression literals): enough
// for this code, which has no JSX or other syntax it does not know.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

const WEB = path.resolve(import.meta.dirname, '../../web');
const files = fs.readdirSync(path.join(WEB, 'js'), { recursive: true })
  .filter((f) => f.endsWith('.js')).map((f) => path.join('js', f)).sort();

// After these (the last token before a '/'), a '/' starts a regular
// expression, not a division.
const BEFORE_REGEX = new Set(['return', 'typeof', 'case', 'do', 'else', 'in', 'of', 'new', 'delete', 'void', 'throw',
                              'instanceof', 'yield', 'await']);

// The string and template literals of JavaScript source `src`: each with
// its static text (template chunks joined by ${}), its line, and its tag
// (the identifier right before a template's backtick, or '').
export function literals(src) {
  const out = [];
  let i = 0;
  let line = 1;
  let last = '';  // the last token that was not a comment: a word, or one punctuation char
  const isWord = (c) => /[\w$]/.test(c);

  function skipString(quote) {
    const start = line;
    let text = '';
    for (i++; i < src.length && src[i] !== quote; i++) {
      if (src[i] === '\\') text += src[i++];
      if (src[i] === '\n') line++;
      text += src[i];
    }
    i++;
    out.push({ text, line: start, tag: '' });
  }

  function skipRegex() {
    let inClass = false;
    for (i++; i < src.length; i++) {
      const c = src[i];
      if (c === '\\') i++;
      else if (c === '[') inClass = true;
      else if (c === ']') inClass = false;
      else if (c === '/' && !inClass) break;
    }
    for (i++; i < src.length && /[a-z]/.test(src[i]); i++);
  }

  function skipTemplate(tag) {
    const start = line;
    const chunks = [''];
    i++;
    while (i < src.length && src[i] !== '`') {
      if (src[i] === '$' && src[i + 1] === '{') {
        i += 2;
        code('}');  // leaves i after the closing '}'
        chunks.push('');
        continue;
      }
      if (src[i] === '\\') chunks[chunks.length - 1] += src[i++];
      if (src[i] === '\n') line++;
      chunks[chunks.length - 1] += src[i++];
    }
    i++;
    out.push({ text: chunks.join('${}'), line: start, tag });
  }

  // Code until the '}' that closes the current ${ (or the end of src).
  function code(until) {
    let depth = 0;
    while (i < src.length) {
      const c = src[i];
      if (c === '\n') {
        line++;
        i++;
      } else if (/\s/.test(c)) {
        i++;
      } else if (c === '/' && src[i + 1] === '/') {
        while (i < src.length && src[i] !== '\n') i++;
      } else if (c === '/' && src[i + 1] === '*') {
        const end = src.indexOf('*/', i + 2);
        const stop = end < 0 ? src.length : end + 2;
        for (; i < stop; i++) if (src[i] === '\n') line++;
      } else if (c === '\'' || c === '"') {
        skipString(c);
        last = 'string';
      } else if (c === '`') {
        skipTemplate(isWord(last[0] ?? '') && !BEFORE_REGEX.has(last) ? last : '');
        last = 'string';
      } else if (c === '/') {
        if (last === '' || (!isWord(last[0]) && !')]'.includes(last)) || BEFORE_REGEX.has(last)) {
          skipRegex();
          last = 'regex';
        } else {
          i++;
          last = '/';
        }
      } else if (isWord(c)) {
        const start = i;
        while (i < src.length && isWord(src[i])) i++;
        last = src.slice(start, i);
      } else {
        if (c === '{') depth++;
        if (c === '}') {
          if (depth === 0 && until === '}') {
            i++;
            return;
          }
          depth--;
        }
        i++;
        last = c;
      }
    }
  }

  code(null);
  return out;
}

const MARKUP = /<[a-zA-Z!/]/;
const SINKS = new RegExp(String.raw`\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write(ln)?|` +
                         String.raw`createContextualFragment|DOMParser|srcdoc|eval)\b|new\s+Function\b`, 'g');

test('the tokenizer finds strings, templates and their tags', () => {
  const found = literals("const a = /[\"'`]/g; x = 1 / 2 / 3; html`<b>${'<i>'}</b>`; f(`<br>${`in`}`) // 'no'\n'y'");
  assert.deepEqual(found.map(({ text, tag }) => [text, tag]),
                   [['<i>', ''], ['<b>${}</b>', 'html'], ['in', ''], ['<br>${}', ''], ['y', '']]);
});

test('only setHtml in dom.js writes markup into the page', () => {
  const found = [];
  for (const f of files) {
    fs.readFileSync(path.join(WEB, f), 'utf8').split('\n').forEach((text, n) => {
      // Comments may name the sinks.
      const codeText = text.replace(/\/\/.*$/, '');
      for (const [sink] of codeText.matchAll(SINKS)) {
        if (!(f === path.join('js', 'dom.js') && sink === 'innerHTML' && codeText.includes('el.innerHTML = render('))) {
          found.push(`web/${f}:${n + 1}: ${sink}`);
        }
      }
    });
  }
  assert.deepEqual(found, []);
});

test('markup is written in html`` only', () => {
  const found = [];
  for (const f of files) {
    for (const { text, line, tag } of literals(fs.readFileSync(path.join(WEB, f), 'utf8'))) {
      if (tag !== 'html' && MARKUP.test(text)) found.push(`web/${f}:${line}: ${tag}\`${text.slice(0, 80)}\``);
    }
  }
  assert.deepEqual(found, [], 'markup outside html`` (a formatter must return a node: see web/js/dom.js)');
});

test('index.html runs no inline script and says so in its Content-Security-Policy', () => {
  const page = fs.readFileSync(path.join(WEB, 'index.html'), 'utf8');
  for (const [tag] of page.matchAll(/<script\b[^>]*>/g)) assert.match(tag, /\ssrc=/, `an inline script: ${tag}`);
  assert.doesNotMatch(page.replace(/<!--[\s\S]*?-->/g, ''), /\son[a-z]+\s*=/i, 'an inline event handler');
  const csp = page.match(/<meta http-equiv="Content-Security-Policy" content="([^"]*)">/)?.[1];
  assert.ok(csp, 'index.html has a Content-Security-Policy');
  const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v]));
  assert.deepEqual(directives['default-src'], ["'none'"]);
  assert.deepEqual(directives['script-src'], ["'self'"]);
  assert.deepEqual(directives['base-uri'], ["'none'"]);
  assert.ok(page.indexOf('Content-Security-Policy') < page.indexOf('<script'), 'the policy comes before any script');
});
