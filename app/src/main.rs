//! The tidemark viewer: `tidemark [RECORDING]`, natively or in a browser.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

#[cfg(not(target_arch = "wasm32"))]
const USAGE: &str = "\
Usage: tidemark [--follow | --one-run] [FILE]...

Shows GPU memory recordings made by `collector` (run.msgpack): the curves over time with their
phases, the attribution per phase, and an explained verdict; also PyTorch memory snapshots
(snap.pickle), and a folder of per-rank snapshots (rank0_memory_snapshot.pickle, …) as one
run. With no FILE, shows an example.

Options:
  --follow     keep reading the files as they are written (a live view of a running job)
  --one-run    open the FILEs (one recording per node: collector --out run-%h.msgpack) as one
               run, their ranks judged together
  -h, --help   show this help
  -V, --version";

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    let mut follow = false;
    let mut one_run = false;
    let mut paths = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--follow") => follow = true,
            Some("--one-run") => one_run = true,
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return std::process::ExitCode::SUCCESS;
            }
            Some("-V" | "--version") => {
                println!("tidemark {}", env!("CARGO_PKG_VERSION"));
                return std::process::ExitCode::SUCCESS;
            }
            Some(flag) if flag.starts_with('-') && flag.len() > 1 => {
                eprintln!("tidemark: unknown option {flag}\n\n{USAGE}");
                return std::process::ExitCode::from(2);
            }
            _ => paths.push(std::path::PathBuf::from(arg)),
        }
    }
    if follow && one_run {
        eprintln!("tidemark: --follow and --one-run do not go together\n\n{USAGE}");
        return std::process::ExitCode::from(2);
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("tidemark")
            .with_inner_size([1280.0, 800.0])
            .with_drag_and_drop(true),
        ..Default::default()
    };
    let result = eframe::run_native(
        "tidemark",
        options,
        Box::new(move |cc| {
            let mut app = if paths.is_empty() {
                tidemark_app::TidemarkApp::default()
            } else {
                tidemark_app::TidemarkApp::empty()
            }
            .with_storage(cc.storage);
            if one_run {
                app.open_as_one_run(&paths);
                app.select(0);
            } else if follow {
                for path in &paths {
                    app.follow_path(path);
                }
                app.select(0);
            } else {
                app.open_paths(&paths);
            }
            Ok(Box::new(app))
        }),
    );
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tidemark: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {
    use eframe::wasm_bindgen::JsCast as _;

    // A crash is shown on the page (web/index.html's failure box), not only in the console.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        show_failure(&format!("tidemark crashed: {info}"));
        default_hook(info);
    }));

    wasm_bindgen_futures::spawn_local(async {
        let Some(document) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        let Some(canvas) = document
            .get_element_by_id("tidemark_canvas")
            .and_then(|e| e.dyn_into::<web_sys::HtmlCanvasElement>().ok())
        else {
            show_failure("the page has no canvas with id tidemark_canvas");
            return;
        };
        let result = eframe::WebRunner::new()
            .start(
                canvas,
                eframe::WebOptions::default(),
                Box::new(|cc| {
                    let mut urls = tidemark_app::web::url_parameters();
                    let ranks = tidemark_app::web::ranks_parameter();
                    let mut app = tidemark_app::TidemarkApp::empty();
                    match (urls.len(), ranks) {
                        (0, _) => app = tidemark_app::TidemarkApp::default(),
                        (_, Some(folder)) => app.open_ranks(&cc.egui_ctx, folder, urls),
                        (1, None) => {
                            let url = urls.remove(0);
                            match tidemark_app::web::follow_parameter() {
                                Some(fetch) => app.follow_url(url, fetch),
                                None => app.open_url(&cc.egui_ctx, url),
                            }
                        }
                        (_, None) => {
                            // Several runs opened together (picked on `collector serve`'s
                            // page): each in its tab, the last compared with the first.
                            for url in urls {
                                app.open_url(&cc.egui_ctx, url);
                            }
                            app.compare = Some(0);
                        }
                    }
                    Ok(Box::new(app))
                }),
            )
            .await;
        match result {
            Ok(()) => {
                if let Some(status) = document.get_element_by_id("status") {
                    status.remove();
                }
            }
            Err(err) => show_failure(&format!("the viewer could not start: {err:?}")),
        }
    });
}

/// Shows `message` in the page's failure box (defined by web/index.html).
#[cfg(target_arch = "wasm32")]
fn show_failure(message: &str) {
    use eframe::wasm_bindgen::JsCast as _;

    let failed = web_sys::window()
        .and_then(|w| js_sys::Reflect::get(&w, &"tidemarkFailed".into()).ok())
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
    if let Some(failed) = failed {
        let _ = failed.call1(&eframe::wasm_bindgen::JsValue::NULL, &message.into());
    }
}
