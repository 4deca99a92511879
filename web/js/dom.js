// The only ways the dashboard puts text from the API into the page. Every
// name in the API (experiments, spaces, parameters, metrics, reasons, worker
// hosts and labels, device names and classes, workloads, which come from a
// command's argv[0]) is chosen by whoever submits an experiment or runs a
// worker, so it is untrusted: a device named <img src=x onerror=...> once ran
// script in the page (and could read the token from localStorage).
//
//   html`...`  markup from a tagged template: every interpolated value is
//              escaped (text and quoted attribute values alike), except Raw
//              ones (the result of another html`` call); arrays are joined.
//              setHtml() is the one place markup becomes DOM (innerHTML).
//   element()  a DOM element built with text nodes, for places that take a
//              node, not markup: ECharts tooltip formatters (ECharts puts a
//              formatter's string into innerHTML as it is, so a formatter
//              never returns a string).
// Nothing else in web/js writes innerHTML, outerHTML, insertAdjacentHTML or
// document.write; tests/web/sinks.test.mjs checks that.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

class Raw {
  constructor(text) {
    this.text = text;
  }
  toString() {
    return this.text;
  }
}

export function escapeHtml(v) {
  return String(v ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function render(v) {
  if (v instanceof Raw) return v.text;
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(v);
}

export function html(strings, ...values) {
  return new Raw(strings.reduce((out, s, i) => out + render(values[i - 1]) + s));
}

export function setHtml(el, markup) {
  el.innerHTML = render(markup);
}

// <tag class=className>children</tag>; a child is a node or text (strings
// and numbers become text nodes, null and undefined are left out).
export function element(tag, className, ...children) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function stateBadge(state) {
  return html`<span class="state ${state}">${state}</span>`;
}
