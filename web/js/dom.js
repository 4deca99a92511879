// Markup from tagged templates: interpolated values are escaped, except
// Raw ones (the result of another html`` call); arrays are joined.

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

export function stateBadge(state) {
  return html`<span class="state ${state}">${state}</span>`;
}
