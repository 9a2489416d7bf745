//! The small parts of HTTP `collector serve` needs, without a server: a request path decoded and
//! resolved inside the served folder (nothing outside it, whatever the spelling), `Range`
//! headers, query parameters, the token compared, content types.

use std::path::{Component, Path, PathBuf};

/// `%XX` sequences decoded; `None` when one is malformed or the result is not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A name made safe for a URL path: every byte but letters, digits, `-._~` and `/` as `%XX`.
pub fn percent_encode_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The path and the query of a request target (`/runs/a?token=x`).
pub fn split_target(target: &str) -> (&str, &str) {
    target.split_once('?').unwrap_or((target, ""))
}

/// The value of `key` in a query string, decoded (`+` is a space).
pub fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(&v.replace('+', " ")))?
    })
}

/// The value of the cookie `key` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == key).then_some(v)
    })
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The file or folder a request names, inside `root` (canonical): `name` is percent-decoded,
/// and refused (`None`) when it is absolute, has an empty, `.` or `..` part, a backslash or a NUL,
/// does not exist, or leads out of `root` once symbolic links are followed.
pub fn resolve(root: &Path, name: &str) -> Option<PathBuf> {
    let name = percent_decode(name)?;
    if name.is_empty() || name.starts_with('/') || name.contains(['\\', '\0']) {
        return None;
    }
    let name = name.strip_suffix('/').unwrap_or(&name);
    if name
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return None;
    }
    let relative = Path::new(name);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let path = std::fs::canonicalize(root.join(relative)).ok()?;
    path.starts_with(root).then_some(path)
}

/// What a `Range` header asks of a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Range {
    /// No range, or one this server answers whole (several ranges): the whole body.
    Whole,
    /// Bytes `start..end` (end exclusive, at most `len`).
    Part {
        /// The first byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// A range that starts past the end: `416`.
    Unsatisfiable,
}

/// Parses `Range: bytes=A-B`, `bytes=A-` and `bytes=-N` against a body of `len` bytes.
pub fn parse_range(header: Option<&str>, len: u64) -> Range {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Range::Whole;
    };
    if spec.contains(',') {
        return Range::Whole;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Range::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    let parse = |s: &str| s.parse::<u64>().ok();
    let (start, end) = match (a.is_empty(), b.is_empty()) {
        // The last N bytes.
        (true, false) => match parse(b) {
            Some(0) => return Range::Unsatisfiable,
            Some(n) => (len.saturating_sub(n), len),
            None => return Range::Whole,
        },
        (false, _) => {
            let Some(start) = parse(a) else {
                return Range::Whole;
            };
            let end = if b.is_empty() {
                len
            } else {
                match parse(b) {
                    Some(last) if last >= start => last.saturating_add(1).min(len),
                    _ => return Range::Whole,
                }
            };
            (start, end)
        }
        (true, true) => return Range::Whole,
    };
    if start >= len {
        Range::Unsatisfiable
    } else {
        Range::Part { start, end }
    }
}

/// The content type of a file of the web viewer, by its name.
pub fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "wasm" => "application/wasm",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_decoded_and_encoded_back() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("%2e%2E").as_deref(), Some(".."));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        let name = "node a/run #1 ü.msgpack";
        assert_eq!(
            percent_decode(&percent_encode_path(name)).as_deref(),
            Some(name)
        );
        assert_eq!(percent_encode_path("a b/c"), "a%20b/c");
    }

    #[test]
    fn query_and_cookie_values() {
        assert_eq!(
            query_value("a=1&token=x%2By", "token").as_deref(),
            Some("x+y")
        );
        assert_eq!(query_value("tokens=1", "token"), None);
        assert_eq!(
            cookie_value("a=1; tidemark_token=abc", "tidemark_token"),
            Some("abc")
        );
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }

    #[test]
    fn ranges_give_exact_bounds() {
        let part = |start, end| Range::Part { start, end };
        assert_eq!(parse_range(None, 100), Range::Whole);
        assert_eq!(parse_range(Some("bytes=0-9"), 100), part(0, 10));
        assert_eq!(parse_range(Some("bytes=90-"), 100), part(90, 100));
        assert_eq!(parse_range(Some("bytes=90-1000"), 100), part(90, 100));
        assert_eq!(parse_range(Some("bytes=-10"), 100), part(90, 100));
        assert_eq!(parse_range(Some("bytes=-1000"), 100), part(0, 100));
        assert_eq!(parse_range(Some("bytes=100-"), 100), Range::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-"), 0), Range::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=5-2"), 100), Range::Whole);
        assert_eq!(parse_range(Some("bytes=0-1,5-6"), 100), Range::Whole);
        assert_eq!(parse_range(Some("items=0-1"), 100), Range::Whole);
    }

    #[test]
    fn nothing_outside_the_root_resolves() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir(root.join("sub")).expect("a folder");
        std::fs::write(root.join("sub/a.msgpack"), b"TIDEMARK").expect("a file");
        let outside = tempfile::tempdir().expect("another folder");
        std::fs::write(outside.path().join("secret"), b"x").expect("a file");
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("link"))
            .expect("a link");
        std::os::unix::fs::symlink(root.join("sub/a.msgpack"), root.join("inside"))
            .expect("a link");
        assert_eq!(
            resolve(&root, "sub/a.msgpack"),
            Some(root.join("sub/a.msgpack"))
        );
        assert_eq!(
            resolve(&root, "sub%2Fa.msgpack"),
            Some(root.join("sub/a.msgpack"))
        );
        assert_eq!(resolve(&root, "inside"), Some(root.join("sub/a.msgpack")));
        for bad in [
            "",
            "..",
            "sub/../sub/a.msgpack",
            "%2e%2e/secret",
            "%2E%2E%2Fsecret",
            "sub/%2e%2e/%2e%2e/etc/passwd",
            "/etc/passwd",
            "%2Fetc%2Fpasswd",
            "./sub/a.msgpack",
            "sub//a.msgpack",
            "sub\\..\\x",
            "link",
            "missing",
        ] {
            assert_eq!(resolve(&root, bad), None, "{bad}");
        }
    }
}
