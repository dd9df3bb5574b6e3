// tools/deckcheck.py runs this on the current slide of a reveal.js deck: what does not fit,
// in slide pixels, and the slide's title.
(() => {
  const s = Reveal.getCurrentSlide(), out = [];
  if (s.scrollHeight > s.clientHeight + 2)
    out.push(`content ${s.scrollHeight} px tall in a ${s.clientHeight} px slide`);
  for (const pre of s.querySelectorAll('pre')) {
    if (pre.scrollWidth > pre.clientWidth + 2) {
      const line = pre.innerText.split('\n').reduce((a, b) => b.length > a.length ? b : a, '');
      out.push(`a line cut at the right edge: "${line.trim().slice(0, 60)}"`);
    }
  }
  for (const img of s.querySelectorAll('img')) {
    if (img.naturalWidth && img.clientWidth < 0.9 * img.naturalWidth)
      out.push(`picture shrunk to ${Math.round(100 * img.clientWidth / img.naturalWidth)} %`);
  }
  // Headings on the slide itself, not inside its speaker notes.
  const heads = [...s.querySelectorAll('h1,h2,h3')].filter(h => !h.closest('aside'));
  const title = heads.length ? heads[0].innerText.replace(/\u00b6$/, '').trim() : '';
  const notes = (Reveal.getSlideNotes(s) || '').replace(/<[^>]*>/g, '').trim();
  if (title && !title.startsWith('Sources') && !notes)
    out.push('no speaker notes (metadata "notes" of its first cell)');
  return JSON.stringify({title: title.slice(0, 50), problems: out});
})()
