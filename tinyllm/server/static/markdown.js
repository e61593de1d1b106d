// A small Markdown renderer that builds DOM nodes and never parses HTML: every piece of the model's text goes
// into the page as a Text node, so a reply holding <script> shows as text.
// Blocks: fenced code, headings, lists, block quotes, paragraphs (a single newline is a line break).
// Inline: `code`, **bold**, *emphasis*, [links](https://...) (http and https only).
//
// Its time is linear in the text: each line is read a bounded number of times, inline text is scanned once
// (code spans, links and emphasis are matched with precomputed indexes and a delimiter stack, never by
// searching ahead again), and nothing recurses per character of input: block quotes and emphasis nest at
// most MAX_DEPTH levels (deeper markers stay text). While a reply streams in, `view(container).update(text)`
// keeps the DOM of the blocks that can no longer change and renders only those after them.
//
// Trees: a node is {tag, attrs, children}; a string child is text. The page turns trees into DOM (`toDom`),
// tests under node into HTML text (`toHtml`). Loaded by the page as a script (window.Markdown) and by node as a
// module.
"use strict";

(function (root) {
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const ITEM = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
  const QUOTE = /^\s*>/;
  const INFO = /^[\w+.-]*$/;
  const WEB = /^https?:\/\/[^\s)]/;
  const MAX_DEPTH = 16;

  function node(tag, children, attrs) {
    return { tag, attrs: attrs || null, children: children || [] };
  }

  // ---- inline text: tokens in one scan, emphasis paired on a stack, then the tree
  function inline(text, links, work) {
    work.steps += text.length;
    const tokens = scan(text, links, work);
    return tree(tokens, pairs(tokens), work);
  }

  function backtickRuns(text) {
    const runs = []; // [position, length] of each run of backticks
    for (let i = 0; i < text.length; ) {
      if (text[i] !== "`") {
        i += 1;
        continue;
      }
      let j = i;
      while (j < text.length && text[j] === "`") j += 1;
      runs.push([i, j - i]);
      i = j;
    }
    return runs;
  }

  // For each run, the next run of the same length: a code span's end. Pointers only move forward.
  function closingRuns(runs) {
    const byLength = new Map();
    runs.forEach(([, len], k) => {
      if (!byLength.has(len)) byLength.set(len, []);
      byLength.get(len).push(k);
    });
    const next = new Map();
    return (k) => {
      const list = byLength.get(runs[k][1]);
      let at = next.get(runs[k][1]) || 0;
      while (at < list.length && list[at] <= k) at += 1;
      next.set(runs[k][1], at);
      return at < list.length ? list[at] : -1;
    };
  }

  // nextOf[i]: the first index >= i whose character passes `test`, or -1.
  function nextIndex(text, test) {
    const nextOf = new Int32Array(text.length + 1).fill(-1);
    for (let i = text.length - 1; i >= 0; i -= 1) nextOf[i] = test(text[i]) ? i : nextOf[i + 1];
    return nextOf;
  }

  function linkAt(text, i, index) {
    const close = index.bracket[i + 1];
    if (close <= i + 1 || text[close + 1] !== "(") return null;
    const stop = index.stop[close + 2];
    if (stop < 0 || text[stop] !== ")") return null;
    const href = text.slice(close + 2, stop);
    if (!WEB.test(href)) return null;
    return { label: text.slice(i + 1, close), href, end: stop + 1 };
  }

  function scan(text, links, work) {
    const tokens = [];
    const runs = backtickRuns(text);
    const closing = closingRuns(runs);
    const index = links && text.includes("](") ? linkIndex(text) : null;
    let run = 0;
    let plain = 0; // where the text not yet in a token starts
    const flush = (i) => {
      if (i > plain) tokens.push(text.slice(plain, i));
    };
    for (let i = 0; i < text.length; ) {
      const c = text[i];
      if (c === "`") {
        while (runs[run][0] < i) run += 1;
        const len = runs[run][1];
        const end = closing(run);
        if (end >= 0) {
          flush(i);
          tokens.push({ code: text.slice(i + len, runs[end][0]) });
          i = plain = runs[end][0] + len;
        } else {
          i += len; // unmatched backticks stay text
        }
      } else if (c === "[" && index) {
        const link = linkAt(text, i, index);
        if (link) {
          flush(i);
          tokens.push(link);
          i = plain = link.end;
        } else {
          i += 1;
        }
      } else if (c === "*") {
        let j = i;
        while (j < text.length && text[j] === "*") j += 1;
        flush(i);
        delimiters(tokens, j - i, !/\s/.test(text[j] || " "), !/\s/.test(text[i - 1] || " "));
        i = plain = j;
      } else {
        i += 1;
      }
    }
    flush(text.length);
    work.steps += tokens.length;
    return tokens;
  }

  function linkIndex(text) {
    return { bracket: nextIndex(text, (c) => c === "]"), stop: nextIndex(text, (c) => c === ")" || /\s/.test(c)) };
  }

  // A run of n stars as ** and * delimiters; a run that only closes gives its * first, so ***x*** is <strong><em>.
  function delimiters(tokens, n, open, close) {
    const sizes = [];
    for (let left = n; left > 0; left -= Math.min(left, 2)) sizes.push(Math.min(left, 2));
    if (close && !open) sizes.reverse();
    for (const size of sizes) tokens.push({ delim: "*".repeat(size), open, close });
  }

  // pair[k]: the index of the delimiter matched with delimiter k, or -1. A closer takes the nearest opener of its
  // kind; openers of the other kind between them can no longer close and are dropped, so pairs never cross.
  function pairs(tokens) {
    const pair = new Int32Array(tokens.length).fill(-1);
    const stacks = { "*": [], "**": [] };
    tokens.forEach((t, k) => {
      if (!t.delim) return;
      const own = stacks[t.delim];
      const other = stacks[t.delim === "*" ? "**" : "*"];
      if (t.close && own.length && own[own.length - 1] !== k - 1) {
        const o = own.pop();
        while (other.length && other[other.length - 1] > o) other.pop();
        pair[o] = k;
        pair[k] = o;
      } else if (t.open) {
        own.push(k);
      }
    });
    return pair;
  }

  function tree(tokens, pair, work) {
    const out = [];
    const stack = [out];
    const literal = new Uint8Array(tokens.length); // closers whose opener nested too deep
    tokens.forEach((t, k) => {
      const top = stack[stack.length - 1];
      if (typeof t === "string") {
        top.push(t);
      } else if (t.code !== undefined) {
        top.push(node("code", [t.code]));
      } else if (t.href !== undefined) {
        const attrs = { href: t.href, target: "_blank", rel: "noopener noreferrer" };
        top.push(node("a", inline(t.label, false, work), attrs));
      } else if (pair[k] > k && stack.length <= MAX_DEPTH) {
        const element = node(t.delim === "**" ? "strong" : "em");
        top.push(element);
        stack.push(element.children);
      } else if (pair[k] >= 0 && pair[k] < k && !literal[k]) {
        stack.pop();
      } else {
        top.push(t.delim);
        if (pair[k] > k) literal[pair[k]] = 1;
      }
    });
    return out;
  }

  // ---- blocks: each starts at a line that is not blank and ends before line `end`
  function fence(line) {
    const t = line.trim();
    const mark = t[0];
    if (mark !== "`" && mark !== "~") return null;
    let n = 0;
    while (t[n] === mark) n += 1;
    const info = t.slice(n).trim();
    return n >= 3 && INFO.test(info) ? { marks: t.slice(0, n), lang: info } : null;
  }

  function startsBlock(line, quotes) {
    return fence(line) !== null || HEADING.test(line) || ITEM.test(line) || (quotes && QUOTE.test(line));
  }

  function codeBlock(lines, i, open) {
    const body = [];
    for (i += 1; i < lines.length && !lines[i].trim().startsWith(open.marks); i += 1) body.push(lines[i]);
    const code = node("code", [body.join("\n")], open.lang ? { class: `language-${open.lang}` } : null);
    return { end: Math.min(i + 1, lines.length), tree: node("pre", [code]) }; // past the closing fence
  }

  function list(lines, i, work) {
    const ordered = /\d/.test(lines[i].match(ITEM)[1]);
    const items = [];
    for (; i < lines.length; i += 1) {
      const m = lines[i].match(ITEM);
      if (!m || /\d/.test(m[1]) !== ordered) break;
      items.push(node("li", inline(m[2], true, work)));
    }
    return { end: i, tree: node(ordered ? "ol" : "ul", items) };
  }

  function paragraph(lines, i, quotes, work) {
    const children = [];
    for (let first = true; i < lines.length && lines[i].trim() && (first || !startsBlock(lines[i], quotes)); i += 1) {
      if (!first) children.push(node("br"));
      for (const piece of inline(lines[i], true, work)) children.push(piece);
      first = false;
    }
    return { end: i, tree: node("p", children) };
  }

  // The quote markers of a line (at most MAX_DEPTH) and the text after them.
  function unquote(line) {
    let depth = 0;
    let at = 0;
    while (depth < MAX_DEPTH) {
      let j = at;
      while (j < line.length && /\s/.test(line[j])) j += 1;
      if (line[j] !== ">") break;
      depth += 1;
      at = j + 1;
      if (/\s/.test(line[at] || "")) at += 1;
    }
    return [depth, line.slice(at)];
  }

  // Quote lines in a row: runs of one depth are parsed as blocks (without quotes) into the blockquote nested
  // that deep, kept on a stack: no recursion per level.
  function quoteBlock(lines, i, work) {
    let end = i;
    while (end < lines.length && QUOTE.test(lines[end])) end += 1;
    const outer = node("blockquote");
    const stack = [outer];
    for (let k = i; k < end; ) {
      const depth = unquote(lines[k])[0];
      const run = [];
      for (; k < end && unquote(lines[k])[0] === depth; k += 1) run.push(unquote(lines[k])[1]);
      while (stack.length > depth) stack.pop();
      while (stack.length < depth) {
        const inner = node("blockquote");
        stack[stack.length - 1].children.push(inner);
        stack.push(inner);
      }
      for (const b of blocks(run, 0, false, work)) stack[stack.length - 1].children.push(b.tree);
    }
    return { end, tree: outer };
  }

  function blockAt(lines, i, quotes, work) {
    work.steps += 1;
    const line = lines[i];
    if (quotes && QUOTE.test(line)) return quoteBlock(lines, i, work);
    const open = fence(line);
    if (open) return codeBlock(lines, i, open);
    const heading = line.match(HEADING);
    if (heading) {
      return { end: i + 1, tree: node(`h${Math.min(heading[1].length + 2, 6)}`, inline(heading[2], true, work)) };
    }
    if (ITEM.test(line)) return list(lines, i, work);
    return paragraph(lines, i, quotes, work);
  }

  function blocks(lines, i, quotes, work) {
    const out = [];
    while (i < lines.length) {
      if (!lines[i].trim()) {
        i += 1;
        continue;
      }
      const b = blockAt(lines, i, quotes, work);
      out.push(b);
      i = b.end;
    }
    return out;
  }

  function parse(text, work) {
    return blocks(text.split("\n"), 0, true, work || { steps: 0 }).map((b) => b.tree);
  }

  // ---- output: DOM for the page, HTML text for tests (both recurse at most ~2 x MAX_DEPTH levels)
  function toDom(t, doc) {
    if (typeof t === "string") return doc.createTextNode(t);
    const element = doc.createElement(t.tag);
    for (const [name, value] of Object.entries(t.attrs || {})) element.setAttribute(name, value);
    for (const child of t.children) element.append(toDom(child, doc));
    return element;
  }

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
  const escape = (s) => s.replace(/[&<>"]/g, (c) => ESCAPES[c]);

  function toHtml(trees) {
    return trees
      .map((t) => {
        if (typeof t === "string") return escape(t);
        const attrs = Object.entries(t.attrs || {}).map(([k, v]) => ` ${k}="${escape(v)}"`);
        return t.tag === "br" ? "<br>" : `<${t.tag}${attrs.join("")}>${toHtml(t.children)}</${t.tag}>`;
      })
      .join("");
  }

  // A reply's DOM, updated as its text grows. A block is final once the line that ended it was complete (not
  // the text's last line) in the text already shown: its DOM stays; the blocks from there on are rendered again.
  function view(container, doc, work) {
    doc = doc || container.ownerDocument;
    work = work || { steps: 0 };
    let shown = "";
    let lines = [""];
    let lastLineAt = 0; // where the last (maybe unfinished) line starts in `shown`
    let kept = []; // [{end, dom}]
    function update(text) {
      if (!text.startsWith(shown)) {
        for (const b of kept) b.dom.remove();
        [shown, lines, lastLineAt, kept] = ["", [""], 0, []];
      }
      const lastLine = lines.length - 1;
      const tail = text.slice(lastLineAt).split("\n");
      lines.length = lastLine;
      for (const line of tail) lines.push(line);
      lastLineAt = text.length - tail[tail.length - 1].length;
      shown = text;
      while (kept.length && kept[kept.length - 1].end >= lastLine) kept.pop().dom.remove();
      let i = kept.length ? kept[kept.length - 1].end : 0;
      while (i < lines.length) {
        if (!lines[i].trim()) {
          i += 1;
          continue;
        }
        const b = blockAt(lines, i, true, work);
        const dom = toDom(b.tree, doc);
        container.append(dom);
        kept.push({ end: b.end, dom });
        i = b.end;
      }
    }
    return { update };
  }

  const api = { parse, toHtml, toDom, view, MAX_DEPTH };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.Markdown = api;
})(typeof window === "undefined" ? globalThis : window);
