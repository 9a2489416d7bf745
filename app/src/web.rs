//! The browser side: fetching a recording named by `?url=` from the page's own origin, and
//! reading a picked file as it arrives (what either is, is told from its first bytes).

use eframe::wasm_bindgen::closure::Closure;
use eframe::wasm_bindgen::{JsCast as _, JsValue};
use wasm_bindgen_futures::JsFuture;

/// The page's query parameters (`?url=…&follow=1`).
fn parameters() -> Option<web_sys::UrlSearchParams> {
    let search = web_sys::window()?.location().search().ok()?;
    web_sys::UrlSearchParams::new_with_str(&search).ok()
}

/// Whether the page asks to follow the file, and how: `?follow=1`, a file still being written
/// (what is added to it is fetched); `?follow=whole`, a run the server makes anew from several
/// files (a folder of nodes' recordings: fetched whole again when they changed).
pub fn follow_parameter() -> Option<crate::follow::Fetch> {
    match parameters()?.get("follow")?.as_str() {
        "1" | "true" => Some(crate::follow::Fetch::Added),
        "whole" => Some(crate::follow::Fetch::Whole),
        _ => None,
    }
}

/// `GET url` (same origin), past the browser's cache, with one `header` if given.
async fn get_fresh(url: &str, header: Option<(&str, &str)>) -> Result<web_sys::Response, String> {
    let window = web_sys::window().ok_or("no window")?;
    let init = web_sys::RequestInit::new();
    init.set_method("GET");
    init.set_mode(web_sys::RequestMode::SameOrigin);
    init.set_cache(web_sys::RequestCache::NoStore);
    let request = web_sys::Request::new_with_str_and_init(url, &init).map_err(describe)?;
    if let Some((name, value)) = header {
        request.headers().set(name, value).map_err(describe)?;
    }
    let response = JsFuture::from(window.fetch_with_request(&request))
        .await
        .map_err(|err| format!("cannot be fetched: {}", describe(err)))?;
    response.dyn_into().map_err(describe)
}

/// The bytes of `url` (same origin) when they differ from the version `etag` names (`None`:
/// the server answered `304 Not Modified`), with the version they are.
pub async fn fetch_if_changed(
    url: &str,
    etag: Option<String>,
) -> Result<Option<(Vec<u8>, Option<String>)>, String> {
    let response = get_fresh(url, etag.as_deref().map(|e| ("If-None-Match", e))).await?;
    match response.status() {
        304 => return Ok(None),
        200 => {}
        status => {
            return Err(format!(
                "cannot be fetched: the server answered {status} {}",
                response.status_text()
            ));
        }
    }
    let etag = response.headers().get("etag").ok().flatten();
    let buffer = JsFuture::from(response.array_buffer().map_err(describe)?)
        .await
        .map_err(|err| format!("cannot be read: {}", describe(err)))?;
    Ok(Some((js_sys::Uint8Array::new(&buffer).to_vec(), etag)))
}

/// The bytes of `url` (same origin) from byte `from` on, at most `most` of them: what a file
/// being written gained since it was last read (`Range: bytes=N-`). The range starts a byte
/// early, so that a file that did not grow is one byte, not a range past its end (which a server
/// refuses with `416`, and the browser logs as an error); `416` is then a file that became
/// shorter. A server that answers the whole file is read past `from`.
pub async fn fetch_from(url: &str, from: u64, most: u64) -> Result<Vec<u8>, String> {
    let early = u64::from(from > 0);
    let asked = from - early;
    let range = format!(
        "bytes={asked}-{}",
        from.saturating_add(most).saturating_sub(1)
    );
    let response = get_fresh(url, Some(("Range", &range))).await?;
    match response.status() {
        416 if from > 0 => {
            return Err("the file became shorter: it was replaced; open it again".to_owned());
        }
        416 => return Ok(Vec::new()),
        200 | 206 => {}
        status => {
            return Err(format!(
                "cannot be fetched: the server answered {status} {}",
                response.status_text()
            ));
        }
    }
    let buffer = JsFuture::from(response.array_buffer().map_err(describe)?)
        .await
        .map_err(|err| format!("cannot be read: {}", describe(err)))?;
    let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
    let skip = if response.status() == 200 {
        from
    } else {
        early
    };
    let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(bytes.len());
    Ok(bytes[skip..].to_vec())
}

fn describe(err: JsValue) -> String {
    err.as_string()
        .or_else(|| {
            err.dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .unwrap_or_else(|| format!("{err:?}"))
}

/// Fetches `url` (relative to the page, same origin only) and opens it as it arrives (a
/// snapshot is read part by part, never held whole), or says what went wrong, naming `url`.
pub async fn fetch(url: &str) -> Result<crate::Run, String> {
    let arriving = fetch_arriving(url).await?;
    let run = arriving.finish();
    performance_mark("stage:judged", &url.into());
    run
}

/// [`fetch`] of a PyTorch memory snapshot (one rank's of a folder), as a snapshot.
pub async fn fetch_snapshot(url: &str) -> Result<collector::snapshot::Snapshot, String> {
    fetch_arriving(url).await?.finish_snapshot()
}

/// The `url` parameters of the page, every one, in order (several runs opened together, or a
/// folder of per-rank snapshots naming each file).
pub fn url_parameters() -> Vec<String> {
    parameters().map_or(Vec::new(), |params| {
        params
            .get_all("url")
            .iter()
            .filter_map(|u| u.as_string())
            .filter(|u| !u.is_empty())
            .collect()
    })
}

/// The `ranks` parameter: the urls are the per-rank snapshots of this folder, one run.
pub fn ranks_parameter() -> Option<String> {
    parameters()?.get("ranks").filter(|r| !r.is_empty())
}

/// The bytes of `url`, arrived part by part into what reads them; a performance mark
/// `stage:read` whose detail is `url` says when they were all read.
async fn fetch_arriving(url: &str) -> Result<crate::Arriving, String> {
    let arriving = fetch_parts(url).await;
    if arriving.is_ok() {
        performance_mark("stage:read", &url.into());
    }
    arriving
}

async fn fetch_parts(url: &str) -> Result<crate::Arriving, String> {
    let named = |err: String| format!("{url}: {err}");
    let window = web_sys::window().ok_or("no window")?;
    let page = window.location().href().map_err(describe)?;
    let resolved = web_sys::Url::new_with_base(url, &page)
        .map_err(|_| named("not a valid address".to_owned()))?;
    let origin = window.location().origin().map_err(describe)?;
    if resolved.origin() != origin {
        return Err(named(format!(
            "only recordings hosted next to this page can be opened by ?url= (this page is on {origin}, the recording on {}); download it and open it with Open…",
            resolved.origin()
        )));
    }
    if let Some(arriving) = fetch_in_worker(url, &resolved.href()).await {
        return arriving;
    }
    let init = web_sys::RequestInit::new();
    init.set_method("GET");
    init.set_mode(web_sys::RequestMode::SameOrigin);
    let request =
        web_sys::Request::new_with_str_and_init(&resolved.href(), &init).map_err(describe)?;
    let response = JsFuture::from(window.fetch_with_request(&request))
        .await
        .map_err(|err| named(format!("cannot be fetched: {}", describe(err))))?;
    let response: web_sys::Response = response.dyn_into().map_err(describe)?;
    if !response.ok() {
        return Err(named(format!(
            "cannot be fetched: the server answered {} {}",
            response.status(),
            response.status_text()
        )));
    }
    let length = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|l| l.parse::<u64>().ok());
    let mut arriving = arriving_of(url, length).inspect_err(|_| {
        // Not downloaded: the browser stops fetching it.
        if let Some(body) = response.body() {
            let _ = body.cancel();
        }
    })?;
    if let Some(body) = response.body() {
        read_stream(&body, &mut arriving)
            .await
            .map_err(|err| err.unwrap_or_else(|err| named(format!("cannot be read: {err}"))))?;
    }
    Ok(arriving)
}

/// Opens a file the user picked, as it is read (a snapshot part by part, never held whole).
pub async fn open_file(file: &web_sys::File) -> Result<crate::Run, String> {
    let name = file.name();
    let mut arriving = crate::Arriving::expecting(&name, file.size() as u64);
    read_stream(&file.stream(), &mut arriving)
        .await
        .map_err(|err| err.unwrap_or_else(|err| format!("{name}: cannot read the file: {err}")))?;
    arriving.finish()
}

/// Reads `stream` to its end into `arriving`, part by part as the browser hands them over.
/// The error is `Ok` with the file's own error (already named), or `Err` with the browser's.
async fn read_stream(
    stream: &web_sys::ReadableStream,
    arriving: &mut crate::Arriving,
) -> Result<(), Result<String, String>> {
    let reader: web_sys::ReadableStreamDefaultReader = stream
        .get_reader()
        .dyn_into()
        .map_err(|err| Err(describe(err.into())))?;
    let mut tally = Tally::default();
    loop {
        let next = JsFuture::from(reader.read())
            .await
            .map_err(|err| Err(describe(err)))?;
        let done = js_sys::Reflect::get(&next, &"done".into())
            .ok()
            .and_then(|d| d.as_bool())
            .unwrap_or(true);
        if done {
            tally.announce();
            return Ok(());
        }
        let value =
            js_sys::Reflect::get(&next, &"value".into()).map_err(|err| Err(describe(err)))?;
        let chunk: js_sys::Uint8Array = value.dyn_into().map_err(|err| Err(describe(err)))?;
        if let Err(err) = tally.push(arriving, &chunk) {
            let _ = reader.cancel();
            return Err(Ok(err));
        }
    }
}

/// The parts of a file as they are read: each copied into the tab's memory once, straight into
/// what reads it, counted, and the time that took.
#[derive(Default)]
struct Tally {
    parts: u64,
    pushing_ms: f64,
}

impl Tally {
    fn push(
        &mut self,
        arriving: &mut crate::Arriving,
        chunk: &js_sys::Uint8Array,
    ) -> Result<(), String> {
        let start = now_ms();
        let result = arriving.push_from(chunk.length() as usize, |room| chunk.copy_to_uninit(room));
        self.parts += 1;
        self.pushing_ms += now_ms() - start;
        result
    }

    /// A performance mark `stage:arrived`: how many parts, and the time reading them took (a
    /// profiler's timeline shows where the rest went).
    fn announce(&self) {
        performance_mark(
            "stage:arrived",
            &format!(
                "{} parts, {:.0} ms read from them",
                self.parts, self.pushing_ms
            )
            .into(),
        );
    }
}

fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// What reads a file of `length` bytes (when the server says) named `url`, or why a tab cannot
/// hold it: said from its size, before anything is downloaded, when it is too big for any kind of
/// file, else as soon as its first bytes tell what it is.
fn arriving_of(url: &str, length: Option<u64>) -> Result<crate::Arriving, String> {
    if let Some(why) = length.and_then(|l| crate::too_big_for_a_tab(url, l, crate::TabFile::Any)) {
        return Err(why);
    }
    Ok(match length {
        Some(len) => crate::Arriving::expecting(url, len),
        None => crate::Arriving::new(url),
    })
}

/// A message to a worker: `{name: value}`.
fn to_worker(name: &str, value: &JsValue) -> js_sys::Object {
    let m = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&m, &name.into(), value);
    m
}

/// `url` (named `href`, resolved) fetched by a worker (`fetch-worker.js`, next to the page)
/// that reads the network while this thread reads the parts it handed over before: a browser
/// delivers a body on the thread that reads it, and read here the network waited while a part
/// was parsed. The worker the page started for it before the app ran (`web/index.html`), when
/// there is one, else one started now. `None` when no worker runs here (none in this browser,
/// its script not served): the page fetches it itself.
async fn fetch_in_worker(url: &str, href: &str) -> Option<Result<crate::Arriving, String>> {
    let named = |err: String| format!("{url}: {err}");
    let inbox = match Inbox::started_by_the_page(href) {
        Some(inbox) => {
            performance_mark("stage:fetch-begun-by-the-page", &url.into());
            inbox
        }
        None => {
            let inbox = Inbox::start("fetch-worker.js")?;
            let ask = to_worker("url", &href.into());
            let _ = js_sys::Reflect::set(&ask, &"window".into(), &crate::TAB_FETCH_WINDOW.into());
            inbox.worker.post_message(&ask).ok()?;
            inbox
        }
    };
    let field = |m: &JsValue, name: &str| {
        js_sys::Reflect::get(m, &name.into())
            .ok()
            .filter(|v| !v.is_undefined())
    };
    // The worker's script not found (or not run): the page's own fetch.
    let head = inbox.next().await?;
    if let Some(error) = field(&head, "error") {
        let error = error.as_string().unwrap_or_default();
        return Some(Err(named(format!("cannot be fetched: {error}"))));
    }
    let head = field(&head, "head")?;
    let status = field(&head, "status")
        .and_then(|s| s.as_f64())
        .unwrap_or(0.0);
    if !(200.0..300.0).contains(&status) {
        let text = field(&head, "statusText")
            .and_then(|t| t.as_string())
            .unwrap_or_default();
        return Some(Err(named(format!(
            "cannot be fetched: the server answered {status} {text}"
        ))));
    }
    let length = field(&head, "length")
        .and_then(|l| l.as_f64())
        .map(|l| l as u64);
    // Before anything is downloaded (the worker ends with the inbox).
    let mut arriving = match arriving_of(url, length) {
        Ok(arriving) => arriving,
        Err(why) => return Some(Err(why)),
    };
    let _ = inbox.worker.post_message(&to_worker("go", &true.into()));
    let mut tally = Tally::default();
    loop {
        let Some(message) = inbox.next().await else {
            return Some(Err(named(
                "cannot be read: the worker fetching it stopped".to_owned(),
            )));
        };
        if let Some(part) = field(&message, "part") {
            let Ok(chunk) = part.dyn_into::<js_sys::Uint8Array>() else {
                continue;
            };
            if let Err(err) = tally.push(&mut arriving, &chunk) {
                return Some(Err(err));
            }
            // Its buffer goes back, to be filled again: neither thread makes one anew a part.
            let took = to_worker("took", &chunk.length().into());
            let buffer = chunk.buffer();
            let _ = js_sys::Reflect::set(&took, &"buffer".into(), &buffer);
            let _ = inbox
                .worker
                .post_message_with_transfer(&took, &js_sys::Array::of1(&buffer));
        } else if let Some(error) = field(&message, "error") {
            let error = error.as_string().unwrap_or_default();
            return Some(Err(named(format!("cannot be read: {error}"))));
        } else if field(&message, "done").is_some() {
            tally.announce();
            return Some(Ok(arriving));
        }
    }
}

/// A worker and the messages it sent that were not read yet (`None`: it failed: its script
/// did not load, or it threw). The worker ends with its inbox.
struct Inbox {
    worker: web_sys::Worker,
    waiting: std::rc::Rc<std::cell::RefCell<Waiting>>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

#[derive(Default)]
struct Waiting {
    messages: std::collections::VecDeque<Option<JsValue>>,
    waker: Option<std::task::Waker>,
}

impl Waiting {
    fn add(waiting: &std::cell::RefCell<Waiting>, message: Option<JsValue>) {
        let mut w = waiting.borrow_mut();
        w.messages.push_back(message);
        if let Some(waker) = w.waker.take() {
            waker.wake();
        }
    }
}

impl Inbox {
    fn start(script: &str) -> Option<Self> {
        Some(Self::of(web_sys::Worker::new(script).ok()?))
    }

    /// The worker `web/index.html` started for `href` before the app ran
    /// (`window.tidemarkEarlyFetch`), with the messages it sent meanwhile (`null`: it failed).
    /// Taken once; one started for another address is ended.
    fn started_by_the_page(href: &str) -> Option<Self> {
        let window = web_sys::window()?;
        let key: JsValue = "tidemarkEarlyFetch".into();
        let early = js_sys::Reflect::get(&window, &key)
            .ok()
            .filter(|e| e.is_object())?;
        let _ = js_sys::Reflect::delete_property(&window, &key);
        let get = |name: &str| js_sys::Reflect::get(&early, &name.into()).ok();
        let worker: web_sys::Worker = get("worker")?.dyn_into().ok()?;
        if get("href").and_then(|h| h.as_string()).as_deref() != Some(href) {
            worker.terminate();
            return None;
        }
        let messages: js_sys::Array = get("messages")?.dyn_into().ok()?;
        // Nothing arrives between these lines (one thread): what came before is read first.
        let inbox = Self::of(worker);
        for message in messages.iter() {
            Waiting::add(&inbox.waiting, (!message.is_null()).then_some(message));
        }
        Some(inbox)
    }

    fn of(worker: web_sys::Worker) -> Self {
        let waiting = std::rc::Rc::new(std::cell::RefCell::new(Waiting::default()));
        let to = waiting.clone();
        let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(
            move |event: web_sys::MessageEvent| Waiting::add(&to, Some(event.data())),
        );
        let to = waiting.clone();
        let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
            // Handled here: not an error in the page's console.
            event.prevent_default();
            Waiting::add(&to, None);
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Self {
            worker,
            waiting,
            _on_message: on_message,
            _on_error: on_error,
        }
    }

    /// The next message, once it came (`None`: the worker failed).
    async fn next(&self) -> Option<JsValue> {
        std::future::poll_fn(|cx| {
            let mut w = self.waiting.borrow_mut();
            match w.messages.pop_front() {
                Some(message) => std::task::Poll::Ready(message),
                None => {
                    w.waker = Some(cx.waker().clone());
                    std::task::Poll::Pending
                }
            }
        })
        .await
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.worker.terminate();
    }
}

/// Tells the page that the file `name` is shown, its first frame painted (told at the start of
/// the frame after it, see `run::Announced`), or that it failed to open: a performance mark
/// `tidemark:shown` or `tidemark:failed` whose detail is the name or the error, then a mark
/// `wasm-memory` whose detail is the bytes of the tab's wasm memory. The browser test waits for
/// these; a profiler shows them on the page's timeline.
pub fn announce(name: &str, error: Option<&String>) {
    let (mark, detail) = match error {
        None => ("tidemark:shown", name),
        Some(error) => ("tidemark:failed", error.as_str()),
    };
    performance_mark(mark, &detail.into());
    let memory = core::arch::wasm32::memory_size::<0>() as f64 * 65536.0;
    performance_mark("wasm-memory", &memory.into());
}

/// Tells the page that the run `name` opened in a tab of its own (shown or behind another): a
/// performance mark `tidemark:opened` whose detail is the name.
pub fn announce_opened(name: &str) {
    performance_mark("tidemark:opened", &name.into());
}

/// Tells the page that a followed file grew: a performance mark `tidemark:grew` whose detail is
/// the samples the run holds now (the browser test waits for more samples than were first shown).
pub fn announce_growth(samples: u64) {
    performance_mark("tidemark:grew", &(samples as f64).into());
}

/// `performance.mark(name, { detail })`; web-sys has the options only as an unstable API.
fn performance_mark(name: &str, detail: &JsValue) {
    let Some(performance) = web_sys::window().and_then(|w| w.performance()) else {
        return;
    };
    let options = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&options, &"detail".into(), detail);
    if let Some(mark_fn) = js_sys::Reflect::get(&performance, &"mark".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
    {
        let _ = mark_fn.call2(&performance, &name.into(), options.as_ref());
    }
}
