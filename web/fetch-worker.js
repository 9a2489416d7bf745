// Fetches the file the page names and hands its body over part by part, so that the network is
// read on this thread while the page's thread parses the parts before (a browser delivers a
// fetch's body on the thread that reads it: read by the page itself, the network waited while
// the page parsed). The page asks with {url, window, most?}; this answers {head: {status,
// statusText, length}} and waits for {go: true} (a file too big for the tab is never downloaded:
// the page ends this worker instead) — or, given `most` (asked before the app runs), goes on at
// once unless the server says the file is longer (then its body is cancelled) — then sends
// {part} after {part} (their buffers moved, not copied), never more than `window` bytes the page
// has not taken back with {took: bytes}, and {done} or {error: message} at the end.

let owed = 0; // bytes handed over and not yet taken back
let room = 0;
let wake = null; // resolves the wait for room, or for the page's go-ahead

function waitFor(ready) {
  return ready() ? Promise.resolve() : new Promise((resolve) => { wake = () => ready() && (wake = null, resolve()); });
}

let go = false;

self.onmessage = async (event) => {
  const m = event.data;
  if (m.took !== undefined) {
    owed -= m.took;
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
    const reader = response.body.getReader();
    for (;;) {
      await waitFor(() => owed < room);
      const { done, value } = await reader.read();
      if (done) break;
      owed += value.byteLength;
      self.postMessage({ part: value }, [value.buffer]);
    }
    self.postMessage({ done: true });
  } catch (err) {
    self.postMessage({ error: String((err && err.message) || err) });
  }
};
