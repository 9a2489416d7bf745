//! The tidemark viewer: `tidemark [RECORDING]`, natively or in a browser.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    let app = match std::env::args_os().nth(1) {
        Some(path) => match std::fs::read(&path) {
            Ok(bytes) => tidemark_app::TidemarkApp::from_bytes(&path.to_string_lossy(), &bytes),
            Err(err) => {
                eprintln!("tidemark: cannot read {}: {err}", path.to_string_lossy());
                return std::process::ExitCode::from(2);
            }
        },
        None => tidemark_app::TidemarkApp::default(),
    };
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("tidemark")
            .with_inner_size([1200.0, 800.0]),
        ..Default::default()
    };
    match eframe::run_native("tidemark", options, Box::new(|_cc| Ok(Box::new(app)))) {
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

    wasm_bindgen_futures::spawn_local(async {
        let Some(document) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        let Some(canvas) = document
            .get_element_by_id("tidemark_canvas")
            .and_then(|e| e.dyn_into::<web_sys::HtmlCanvasElement>().ok())
        else {
            return;
        };
        let result = eframe::WebRunner::new()
            .start(
                canvas,
                eframe::WebOptions::default(),
                Box::new(|_cc| Ok(Box::new(tidemark_app::TidemarkApp::default()))),
            )
            .await;
        if let Some(loading) = document.get_element_by_id("loading_text") {
            match result {
                Ok(()) => loading.remove(),
                Err(err) => loading.set_inner_html(&format!(
                    "<p>The app has crashed.</p><p>{err:?}</p><p>See the developer console for details.</p>"
                )),
            }
        }
    });
}
