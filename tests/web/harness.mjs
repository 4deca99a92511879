// What the dashboard's browser tests (dashboard.test.mjs, xss.test.mjs)
// share: their arguments, child processes that never outlive the test, a
// real hpo-server with a token and its REST API, and headless Chromium.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';

// --server, --worker, --web-root and --out are required; --chromium has
// Debian's path as its default.
export function testArgs() {
  const { values } = parseArgs({
    options: {
      server: { type: 'string' }, worker: { type: 'string' }, 'web-root': { type: 'string' },
      out: { type: 'string' }, chromium: { type: 'string', default: '/usr/bin/chromium' },
    },
  });
  for (const required of ['server', 'worker', 'web-root', 'out']) {
    if (!values[required]) throw new Error(`--${required} is required`);
  }
  return values;
}

export function log(...xs) {
  console.log(`[${(process.uptime()).toFixed(1)}s]`, ...xs);
}

export async function waitFor(what, fn, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// A temp dir for one test's files and the processes it starts; whatever
// happens, they are killed when node exits.
export class Processes {
  constructor(prefix) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    this.children = [];
    process.on('exit', () => {
      for (const { child } of this.children) child.kill('SIGKILL');
    });
  }

  // Starts bin with argv; its stdout and stderr go to DIR/NAME.log.
  start(bin, argv, name) {
    const out = fs.openSync(path.join(this.dir, `${name}.log`), 'w');
    const child = spawn(bin, argv, { stdio: ['ignore', out, out] });
    this.children.push({ child, name });
    return child;
  }

  printLogs() {
    for (const { name } of this.children) {
      const tail = fs.readFileSync(path.join(this.dir, `${name}.log`), 'utf8').slice(-3000);
      console.error(`--- ${name}.log (tail) ---\n${tail}`);
    }
  }

  removeDir() {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

// hpo-server on 127.0.0.1 (free ports), its SQLite store in procs.dir, the
// dashboard from webRoot. Returns { base, ports, db, api }, where
// api(method, path, body) calls REST with the token and answers the JSON
// (throws on a non-2xx status). Every request that is not a GET says
// Content-Type: application/json, as the server requires of state changes.
export async function startServer(procs, { server, webRoot, token }) {
  const db = path.join(procs.dir, 'hpo.db');
  const portFile = path.join(procs.dir, 'ports.json');
  procs.start(server, ['--store', `sqlite://${db}`, '--http', '127.0.0.1:0', '--grpc', '127.0.0.1:0',
                       '--port-file', portFile, '--web-root', webRoot, '--token', token, '--lease-timeout', '600'],
              'server');
  const ports = await waitFor('the server to listen', () => {
    try {
      return JSON.parse(fs.readFileSync(portFile, 'utf8'));
    } catch {
      return null;
    }
  });
  const base = `http://127.0.0.1:${ports.http}`;
  async function api(method, p, body) {
    const headers = { Authorization: `Bearer ${token}` };
    if (method !== 'GET') headers['Content-Type'] = 'application/json';
    const r = await fetch(base + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const j = await r.json();
    if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(j)}`);
    return j;
  }
  return { base, ports, db, api };
}

// Headless Chromium through playwright-core, a devDependency of the
// dashboard's package (web/).
export async function launchChromium({ chromium: executablePath, 'web-root': webRoot }) {
  const { chromium } = createRequire(path.resolve(webRoot, 'package.json'))('playwright-core');
  return chromium.launch({
    executablePath, headless: true,
    args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
  });
}

// Waits for the page's next completed render (web/js/app.js counts them in
// #view's data-renders) and answers the count; throws when the page shows
// an error instead, with consoleErrors in the message.
export async function rendered(page, after = 0, { timeout = 60000, consoleErrors = [] } = {}) {
  await page.waitForFunction((n) => Number(document.getElementById('view').dataset.renders) > n ||
                                   document.querySelector('#view .error'), after, { timeout });
  const error = await page.$('#view .error');
  if (error) throw new Error(`the page shows an error: ${await error.textContent()}\n${consoleErrors.join('\n')}`);
  return Number(await page.$eval('#view', (v) => v.dataset.renders));
}
