// tools/deckcheck.py runs this on the current slide of a reveal.js deck: what does not fit or
// cannot be read from the back row, in screen pixels, and the slide's title and notes. `limit`
// holds the bounds tools/deckcheck.py passes (codeLines: tools/nbmeta.py's, which cuts slides).
(limit) => {
  const s = Reveal.getCurrentSlide(), out = [], scale = Reveal.getScale();
  const shown = sel => [...s.querySelectorAll(sel)].filter(e => !e.closest('aside'));
  if (s.scrollHeight > s.clientHeight + 2)
    out.push(`content ${s.scrollHeight} px tall in a ${s.clientHeight} px slide`);
  for (const pre of shown('pre')) {
    if (pre.scrollWidth > pre.clientWidth + 2) {
      const line = pre.innerText.split('\n').reduce((a, b) => b.length > a.length ? b : a, '');
      out.push(`a line cut at the right edge: "${line.trim().slice(0, 60)}"`);
    }
    const px = parseFloat(getComputedStyle(pre).fontSize) * scale;
    if (px < 19.5) out.push(`code or output at ${px.toFixed(1)} px, below 20 px`);
  }
  const code = shown('.jp-InputArea pre').map(p => p.innerText.trimEnd().split('\n').length)
    .reduce((a, b) => a + b, 0);
  if (code > limit.codeLines)
    out.push(`${code} lines of code, more than ${limit.codeLines} (a minute's explaining)`);
  for (const cell of shown('.celltag_draws'))
    if (!cell.querySelector('.jp-OutputArea img, .jp-OutputArea svg'))
      out.push('a cell that draws shows no figure (is matplotlib drawing inline?)');
  for (const img of shown('img')) {
    if (!img.naturalWidth) continue;
    // object-fit: contain draws the picture at the smaller of the two scales.
    const fit = Math.min(img.clientWidth / img.naturalWidth, img.clientHeight / img.naturalHeight);
    if (fit < 0.9) out.push(`picture shrunk to ${Math.round(100 * fit)} %`);
    else if (img.closest('.celltag_draws') && fit * img.naturalWidth < 0.85 * s.clientWidth
             && fit * img.naturalHeight < 540)
      out.push(`a plot fills ${Math.round(100 * fit * img.naturalWidth / s.clientWidth)} % ` +
               'of the width: give it the slide');
  }
  const heads = shown('h1,h2,h3');
  const title = heads.length ? heads[0].innerText.replace(/\u00b6$/, '').trim() : '';
  const notes = (Reveal.getSlideNotes(s) || '').replace(/<[^>]*>/g, '').trim();
  if (title && !title.startsWith('Sources') && !notes)
    out.push('no speaker notes (metadata "notes" of its first cell)');
  // A figure the notes give (a ratio, a time, a rate, a size) must be one the slide shows: notes
  // read aloud beside another run's numbers contradict the screen. Ranges ("1.5-3x") may stand.
  const text = s.innerText;  // rendered text: the hidden notes are not in it
  const said = notes.replace(/\d[\d.,]*\s?[-–]\s?\d[\d.,]*/g, ' ');
  const unit = /(\d[\d,]*(?:\.\d+)?)\s?(x|×|%|ns|us|µs|ms|s|[KMGT]i?B(?:\/s)?|[GT]FLOP\/s)(?![\w\/])/g;
  for (const [, number, u] of said.matchAll(unit))
    if (!text.includes(number))
      out.push(`the notes say ${number}${/^[x×%]$/.test(u) ? '' : ' '}${u}, which the slide does not show`);
  return JSON.stringify({title: title.slice(0, 50), notes: !!notes, problems: out});
}
