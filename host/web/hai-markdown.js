// Assistant answers as markdown, made safe to show. The text comes from a model
// or a plugin, so it is untrusted twice over:
// - marked (vendor/marked.esm.js) parses it, but raw HTML in the text is
//   rendered as visible text, never as markup, and images become their alt text
//   (a chat answer has no business loading remote pixels);
// - DOMPurify (vendor/purify.min.js, loaded before this module) then keeps only
//   the elements a chat answer needs and links to http(s)/mailto only, and
//   returns DOM nodes, so no string of ours is ever assigned to innerHTML.
// Links open in a new tab without handing it this page (rel=noopener noreferrer).
// A partial answer renders too: the whole text so far is parsed again, so an
// unclosed code fence or emphasis is just shorter output, never broken markup.

import { Marked } from '/vendor/marked.esm.js';

const ENTITIES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => ENTITIES[c]);

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    html: ({ text }) => escapeHtml(text),
    image: ({ text }) => escapeHtml(text),
  },
});

const PURIFY = {
  ALLOWED_TAGS: [
    'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'p', 'br', 'hr', 'strong', 'em', 'del', 'code', 'pre',
    'ul', 'ol', 'li', 'blockquote', 'a', 'table', 'thead', 'tbody', 'tr', 'th', 'td',
  ],
  ALLOWED_ATTR: ['href', 'title', 'start'],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  RETURN_DOM_FRAGMENT: true,
};

const purify = window.DOMPurify;
purify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('rel', 'noopener noreferrer');
    node.setAttribute('target', '_blank');
  }
});

/** The markdown `text` as a sanitised DocumentFragment. */
export function renderMarkdown(text) {
  const fragment = purify.sanitize(marked.parse(String(text ?? '')), PURIFY);
  // A link whose address was refused keeps its words, not a dead anchor.
  for (const anchor of fragment.querySelectorAll('a:not([href])')) {
    anchor.replaceWith(...anchor.childNodes);
  }
  return fragment;
}
