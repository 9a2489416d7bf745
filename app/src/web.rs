//! The browser side: fetching a recording named by `?url=` from the page's own origin.

use eframe::wasm_bindgen::{JsCast as _, JsValue};
use wasm_bindgen_futures::JsFuture;

/// The `url` query parameter of the page, if any.
pub fn url_parameter() -> Option<String> {
    let search = web_sys::window()?.location().search().ok()?;
    let params = web_sys::UrlSearchParams::new_with_str(&search).ok()?;
    params.get("url").filter(|u| !u.is_empty())
}

fn describe(err: JsValue) -> String {
    err.as_string()
        .or_else(|| {
            err.dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .unwrap_or_else(|| format!("{err:?}"))
}

/// Fetches `url` (relative to the page, same origin only) and returns its bytes, or what went
/// wrong in words.
pub async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let window = web_sys::window().ok_or("no window")?;
    let page = window.location().href().map_err(describe)?;
    let resolved =
        web_sys::Url::new_with_base(url, &page).map_err(|_| "not a valid address".to_owned())?;
    let origin = window.location().origin().map_err(describe)?;
    if resolved.origin() != origin {
        return Err(format!(
            "only recordings hosted next to this page can be opened by ?url= (this page is on {origin}, the recording on {}); download it and open it with Open…",
            resolved.origin()
        ));
    }
    let init = web_sys::RequestInit::new();
    init.set_method("GET");
    init.set_mode(web_sys::RequestMode::SameOrigin);
    let request =
        web_sys::Request::new_with_str_and_init(&resolved.href(), &init).map_err(describe)?;
    let response = JsFuture::from(window.fetch_with_request(&request))
        .await
        .map_err(|err| format!("cannot be fetched: {}", describe(err)))?;
    let response: web_sys::Response = response.dyn_into().map_err(describe)?;
    if !response.ok() {
        return Err(format!(
            "cannot be fetched: the server answered {} {}",
            response.status(),
            response.status_text()
        ));
    }
    // Said before downloading it all, when the server says how big it is.
    let length = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|l| l.parse::<u64>().ok());
    let pickle = url.ends_with(".pickle") || url.ends_with(".pkl");
    if let Some(why) = length.and_then(|l| crate::run::too_big_for_a_tab(url, l, pickle)) {
        return Err(why
            .strip_prefix(&format!("{url}: "))
            .unwrap_or(&why)
            .to_owned());
    }
    let buffer = JsFuture::from(response.array_buffer().map_err(describe)?)
        .await
        .map_err(|err| format!("cannot be read: {}", describe(err)))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Tells the page that the file `name` is shown, its first frame drawn, or that it failed to
/// open: a performance mark `tidemark:shown` or `tidemark:failed` whose detail is the name or
/// the error. The browser test waits for these; a profiler shows them on the page's timeline.
pub fn announce(name: &str, error: Option<&String>) {
    let Some(performance) = web_sys::window().and_then(|w| w.performance()) else {
        return;
    };
    let (mark, detail) = match error {
        None => ("tidemark:shown", name),
        Some(error) => ("tidemark:failed", error.as_str()),
    };
    // `performance.mark(name, { detail })`; web-sys has the options only as an unstable API.
    let options = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&options, &"detail".into(), &detail.into());
    if let Some(mark_fn) = js_sys::Reflect::get(&performance, &"mark".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
    {
        let _ = mark_fn.call2(&performance, &mark.into(), &options);
    }
}
