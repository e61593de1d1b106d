// A small Markdown renderer that builds DOM nodes and never parses HTML: every piece of the model's text goes
// into the page as a Text node (or an element's textContent), so a reply holding <script> shows as text.
// Blocks: fenced code, headings, lists, block quotes, paragraphs (a single newline is a line break).
// Inline: `code`, **bold**, *emphasis*, [links](https://...) (http and https only).
"use strict";

(() => {
  const FENCE = /^\s*(```+|~~~+)\s*([\w+.-]*)\s*$/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const ITEM = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
  const QUOTE = /^\s*>\s?(.*)$/;
  const INLINE = /(`+)([\s\S]*?)\1|\*\*(?=\S)([\s\S]*?\S)\*\*|\*(?=\S)([^*]*?\S)\*|\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g;

  function el(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.append(text.slice(last, m.index));
      if (m[1] !== undefined) {
        const code = el("code");
        code.textContent = m[2];
        parent.append(code);
      } else if (m[3] !== undefined) {
        const strong = el("strong");
        inline(strong, m[3]);
        parent.append(strong);
      } else if (m[4] !== undefined) {
        const em = el("em");
        inline(em, m[4]);
        parent.append(em);
      } else {
        const a = el("a");
        a.href = m[6];
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        inline(a, m[5]);
        parent.append(a);
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || ITEM.test(line) || QUOTE.test(line);
  }

  function codeBlock(lines, i, out) {
    const [, fence, lang] = lines[i].match(FENCE);
    const body = [];
    for (i += 1; i < lines.length && !lines[i].trim().startsWith(fence); i += 1) body.push(lines[i]);
    const pre = el("pre");
    const code = el("code", lang ? `language-${lang}` : "");
    code.textContent = body.join("\n");
    pre.append(code);
    out.append(pre);
    return i + 1; // past the closing fence (or the end, while it streams)
  }

  function list(lines, i, out) {
    const ordered = /\d/.test(lines[i].match(ITEM)[1]);
    const node = el(ordered ? "ol" : "ul");
    for (; i < lines.length; i += 1) {
      const m = lines[i].match(ITEM);
      if (!m || /\d/.test(m[1]) !== ordered) break;
      const li = el("li");
      inline(li, m[2]);
      node.append(li);
    }
    out.append(node);
    return i;
  }

  function quote(lines, i, out) {
    const inner = [];
    for (; i < lines.length && QUOTE.test(lines[i]); i += 1) inner.push(lines[i].match(QUOTE)[1]);
    const node = el("blockquote");
    node.append(render(inner.join("\n")));
    out.append(node);
    return i;
  }

  function paragraph(lines, i, out) {
    const p = el("p");
    for (let first = true; i < lines.length && lines[i].trim() && (first || !startsBlock(lines[i])); i += 1) {
      if (!first) p.append(el("br"));
      inline(p, lines[i]);
      first = false;
    }
    out.append(p);
    return i;
  }

  function render(text) {
    const out = document.createDocumentFragment();
    const lines = text.split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (!line.trim()) {
        i += 1;
      } else if (FENCE.test(line)) {
        i = codeBlock(lines, i, out);
      } else if (HEADING.test(line)) {
        const [, hashes, title] = line.match(HEADING);
        const h = el(`h${Math.min(hashes.length + 2, 6)}`);
        inline(h, title);
        out.append(h);
        i += 1;
      } else if (ITEM.test(line)) {
        i = list(lines, i, out);
      } else if (QUOTE.test(line)) {
        i = quote(lines, i, out);
      } else {
        i = paragraph(lines, i, out);
      }
    }
    return out;
  }

  window.renderMarkdown = render;
})();
