// A document shaped like the DOM, enough for markdown.js's view: elements, text nodes, append, remove, and each
// node's HTML (through the renderer's own escaping). `doc.created` counts the elements made.
"use strict";

class Text {
  constructor(text) {
    this.text = text;
  }
  html(md) {
    return md.toHtml([this.text]);
  }
  remove() {
    this.parent.kids.splice(this.parent.kids.indexOf(this), 1);
  }
}

class Element {
  constructor(tag) {
    this.tag = tag;
    this.attrs = {};
    this.kids = [];
  }
  setAttribute(name, value) {
    this.attrs[name] = String(value);
  }
  append(...nodes) {
    for (const x of nodes) {
      const n = typeof x === "string" ? new Text(x) : x;
      n.parent = this;
      this.kids.push(n);
    }
  }
  remove() {
    this.parent.kids.splice(this.parent.kids.indexOf(this), 1);
  }
  html(md) {
    const inner = this.kids.map((k) => k.html(md)).join("");
    const empty = md.toHtml([{ tag: this.tag, attrs: this.attrs, children: [] }]);
    return this.tag === "br" ? empty : empty.replace(/(<\/\w+>)$/, (end) => inner + end);
  }
}

const doc = {
  created: 0,
  createElement(tag) {
    this.created += 1;
    return new Element(tag);
  },
  createTextNode(text) {
    return new Text(text);
  },
};

module.exports = { Element, doc };
