// Fetches the file the page names and hands its body over part by part, so that the network is
// read on this thread while the page's thread parses the parts before (a browser delivers a
// fetch's body on the thread that reads it: read by the page itself, the network waited while
// the page parsed). The page asks with {url, window, most?}; this answers {head: {status,
// statusText, length}} and waits for {go: true} (a file too big for the tab is never downloaded:
// the page ends this worker instead) — or, given `most` (asked before the app runs), goes on at
// once unless the server says the file is longer (then its body is cancelled) — then sends
// {part} after {part}, never more than `window` bytes the page has not taken back with
// {took: bytes, buffer?}, and {done} or {error: message} at the end.
//
// A part is PART bytes (the last one fewer), read into a buffer the page gave back after reading
// the part before it (the buffers move between the threads, never copied, never made anew): a
// few hundred parts for a big file where the body comes in thousands of pieces of its own, each a
// message, an answer and a fresh buffer on both threads.

const PART = 4 << 20;
let owed = 0; // bytes handed over and not yet taken back
let room = 0;
let wake = null; // resolves the wait for room, or for the page's go-ahead
const free = []; // buffers the page gave back

function waitFor(ready) {
  return ready() ? Promise.resolve() : new Promise((resolve) => { wake = () => ready() && (wake = null, resolve()); });
}

let go = false;

self.onmessage = async (event) => {
  const m = event.data;
  if (m.took !== undefined) {
    owed -= m.took;
    if (m.buffer instanceof ArrayBuffer && m.buffer.byteLength === PART) free.push(m.buffer);
    if (wake) wake();
    return;
  }
  if (m.go) {
    go = true;
    if (wake) wake();
    return;
  }
  if (m.url === undefined) return;
  room = m.window;
  try {
    const response = await fetch(m.url, { mode: "same-origin" });
    const length = Number(response.headers.get("content-length"));
    self.postMessage({
      head: { status: response.status, statusText: response.statusText, length: length > 0 ? length : null },
    });
    if (!response.ok) return;
    // Asked before the app runs: a file longer than any tab opens is not read (a browser reads
    // tens of MiB ahead into its buffers by itself while a body waits), the rest goes on at once.
    const refused = m.most !== undefined && length > m.most;
    if (refused) await response.body.cancel();
    else if (m.most !== undefined) go = true;
    await waitFor(() => go);
    if (refused) throw new Error(`${length} bytes: more than a tab opens`);
    const fill = filler(response.body);
    for (let ended = false; !ended;) {
      await waitFor(() => owed < room);
      const [buffer, filled, end] = await fill(free.pop() || new ArrayBuffer(PART));
      ended = end;
      if (filled === 0) break;
      owed += filled;
      self.postMessage({ part: new Uint8Array(buffer, 0, filled) }, [buffer]);
    }
    self.postMessage({ done: true });
  } catch (err) {
    self.postMessage({ error: String((err && err.message) || err) });
  }
};

// What fills a buffer from `body` as far as it goes: resolves to [the buffer (a read into it moves
// it), the bytes in it, whether the body ended]. The body's bytes are read straight into the
// buffer where the browser can (a byte stream), else copied there from the pieces it hands over.
function filler(body) {
  let byob = null;
  try {
    byob = body.getReader({ mode: "byob" });
  } catch (_) {
    // Not a byte stream here: pieces, copied.
  }
  if (byob) {
    return async (buffer) => {
      let filled = 0;
      while (filled < buffer.byteLength) {
        const { done, value } = await byob.read(new Uint8Array(buffer, filled));
        if (value) buffer = value.buffer;
        if (done) return [buffer, filled, true];
        filled += value.byteLength;
      }
      return [buffer, filled, false];
    };
  }
  const reader = body.getReader();
  let left = null; // what the last piece had beyond the buffer before
  return async (buffer) => {
    let filled = 0;
    while (filled < buffer.byteLength) {
      if (!left) {
        const { done, value } = await reader.read();
        if (done) return [buffer, filled, true];
        left = value;
      }
      const n = Math.min(left.byteLength, buffer.byteLength - filled);
      new Uint8Array(buffer, filled, n).set(n === left.byteLength ? left : left.subarray(0, n));
      filled += n;
      left = n < left.byteLength ? left.subarray(n) : null;
    }
    return [buffer, filled, false];
  };
}
