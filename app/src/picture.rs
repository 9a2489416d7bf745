//! *Save image*: the window as it is drawn, as a PNG — natively through a file dialog, in the
//! browser as a download. egui takes the screenshot of the next frame and hands it to a callback;
//! the app saves it on the frame after.

use std::sync::{Arc, Mutex};

/// What the screenshot callback hands over, and what saving said.
#[derive(Clone, Default)]
pub struct Pending {
    image: Arc<Mutex<Option<Arc<egui::ColorImage>>>>,
    status: Arc<Mutex<Option<String>>>,
}

impl Pending {
    /// Asks egui for a screenshot of the next frame.
    pub fn request(&self, ctx: &egui::Context) {
        let slot = Arc::clone(&self.image);
        let repaint = ctx.clone();
        ctx.request_screenshot(move |image| {
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(image);
            }
            repaint.request_repaint();
        });
        self.say("taking the picture…".to_owned());
    }

    /// The screenshot, once it has arrived.
    pub fn take(&self) -> Option<Arc<egui::ColorImage>> {
        self.image.lock().ok().and_then(|mut slot| slot.take())
    }

    /// The last word on saving ("saved to …", or the error).
    pub fn status(&self) -> Option<String> {
        self.status.lock().ok().and_then(|s| s.clone())
    }

    fn say(&self, text: String) {
        if let Ok(mut status) = self.status.lock() {
            *status = Some(text);
        }
    }

    /// Encodes the screenshot and saves it: to `destination` when given (tests, scripts), else
    /// where the user picks (native) or as a download (web).
    pub fn save(&self, image: &egui::ColorImage, destination: Option<std::path::PathBuf>) {
        let png = match encode_png(image) {
            Ok(png) => png,
            Err(err) => return self.say(format!("cannot encode the picture: {err}")),
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let pending = self.clone();
            let write = move |path: std::path::PathBuf| match std::fs::write(&path, &png) {
                Ok(()) => pending.say(format!("saved {}", path.display())),
                Err(err) => pending.say(format!("cannot write {}: {err}", path.display())),
            };
            match destination {
                Some(path) => write(path),
                None => {
                    let status = self.clone();
                    // The dialog blocks its thread until the user answers.
                    std::thread::spawn(move || {
                        match rfd::FileDialog::new()
                            .set_title("Save image")
                            .set_file_name("tidemark.png")
                            .add_filter("PNG image", &["png"])
                            .save_file()
                        {
                            Some(path) => write(path),
                            None => status.say("not saved".to_owned()),
                        }
                    });
                }
            }
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = destination;
            match download(&png, "tidemark.png") {
                Ok(()) => self.say("downloaded tidemark.png".to_owned()),
                Err(err) => self.say(format!("cannot download the picture: {err}")),
            }
        }
    }
}

/// The image as PNG bytes (8-bit RGBA, sRGB).
pub fn encode_png(image: &egui::ColorImage) -> Result<Vec<u8>, String> {
    let [width, height] = image.size;
    let (w, h) = (
        u32::try_from(width).map_err(|e| e.to_string())?,
        u32::try_from(height).map_err(|e| e.to_string())?,
    );
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    let bytes: Vec<u8> = image
        .pixels
        .iter()
        .flat_map(|c| c.to_srgba_unmultiplied())
        .collect();
    writer.write_image_data(&bytes).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Hands bytes to the browser as a file download (a Blob URL on a clicked link).
#[cfg(target_arch = "wasm32")]
fn download(bytes: &[u8], name: &str) -> Result<(), String> {
    use eframe::wasm_bindgen::JsCast as _;
    let err = |e: eframe::wasm_bindgen::JsValue| format!("{e:?}");
    let window = web_sys::window().ok_or("no window")?;
    let document = window.document().ok_or("no document")?;
    let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type("image/png");
    let blob =
        web_sys::Blob::new_with_u8_array_sequence_and_options(&parts, &options).map_err(err)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(err)?;
    let link: web_sys::HtmlAnchorElement = document
        .create_element("a")
        .map_err(err)?
        .dyn_into()
        .map_err(|_| "not a link".to_owned())?;
    link.set_href(&url);
    link.set_download(name);
    link.click();
    web_sys::Url::revoke_object_url(&url).map_err(err)?;
    Ok(())
}
