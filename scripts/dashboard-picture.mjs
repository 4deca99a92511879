#!/usr/bin/env node
// A picture of one part of the dashboard, for the docs: loads
// URL#ROUTE with the token, waits for the page's render, and saves the
// element matching SELECTOR as a PNG.
//   node scripts/dashboard-picture.mjs --url http://127.0.0.1:8080 --token T \
//     --route '#/experiments/1' --selector '#front-row' --out docs/images/front.png
// Needs chromium and web/node_modules (scripts/setup installs both).
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium, rendered } from '../tests/web/harness.mjs';

const repo = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) =>
  (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
for (const need of ['url', 'token', 'route', 'selector', 'out']) {
  if (!args[need]) {
    console.error(`dashboard-picture: --${need} is missing`);
    process.exit(2);
  }
}
const browser = await launchChromium({ chromium: args.chromium ?? '/usr/bin/chromium',
                                       'web-root': path.join(repo, 'web') });
try {
  const page = await browser.newPage({ viewport: { width: Number(args.width ?? 1280), height: 900 } });
  await page.goto(`${args.url}/?token=${encodeURIComponent(args.token)}${args.route}`);
  await rendered(page);
  await page.waitForTimeout(500);  // the charts' first frame
  const el = await page.waitForSelector(args.selector);
  await el.screenshot({ path: args.out });
  console.error(`dashboard-picture: wrote ${args.out}`);
} finally {
  await browser.close();
}
