//! Turning the bytes of a Python file into text the parser can read.
//!
//! Python decodes source as UTF-8 unless a PEP 263 cookie on line 1 or 2 names another
//! encoding; a UTF-8 BOM overrides everything. We follow the same rules so latin-1 or koi8-r
//! files from old projects keep their imports instead of being dropped.

use std::borrow::Cow;

use encoding_rs::Encoding;

/// Decoded source text (borrowed from the bytes when they already are UTF-8) and what had to
/// be done to get it.
pub struct Decoded<'a> {
    pub text: Cow<'a, str>,
    /// Set when the bytes were not valid in the declared encoding and some were replaced.
    pub lossy: Option<String>,
}

pub fn decode(bytes: &[u8]) -> Decoded<'_> {
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        return decode_with(rest, encoding_rs::UTF_8, "utf-8 (BOM)");
    }
    match coding_cookie(bytes) {
        Some(label) => match Encoding::for_label(python_to_whatwg_label(&label).as_bytes()) {
            Some(encoding) => decode_with(bytes, encoding, &label),
            None => {
                let mut decoded = decode_with(bytes, encoding_rs::UTF_8, "utf-8");
                decoded.lossy = Some(format!("unknown coding cookie {label:?}; read as UTF-8"));
                decoded
            }
        },
        None => decode_with(bytes, encoding_rs::UTF_8, "utf-8"),
    }
}

fn decode_with<'a>(bytes: &'a [u8], encoding: &'static Encoding, label: &str) -> Decoded<'a> {
    if encoding == encoding_rs::UTF_8 {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return Decoded {
                text: Cow::Borrowed(text),
                lossy: None,
            };
        }
    }
    let (text, had_errors) = encoding.decode_without_bom_handling(bytes);
    Decoded {
        text,
        lossy: had_errors.then(|| format!("bytes invalid in {label} were replaced")),
    }
}

/// The encoding named by a PEP 263 cookie (`# -*- coding: latin-1 -*-`, `# vim: set
/// fileencoding=utf-8`) on one of the first two lines, which must be comments.
fn coding_cookie(bytes: &[u8]) -> Option<String> {
    for line in bytes.split(|&b| b == b'\n').take(2) {
        let trimmed = trim_start(line);
        if !trimmed.starts_with(b"#") {
            if trimmed.is_empty() || trimmed == b"\r" {
                continue;
            }
            return None;
        }
        let text = String::from_utf8_lossy(trimmed);
        if let Some(pos) = text.find("coding") {
            let rest = &text[pos + "coding".len()..];
            let Some(rest) = rest.strip_prefix(':').or_else(|| rest.strip_prefix('=')) else {
                continue;
            };
            let name: String = rest
                .trim_start_matches([' ', '\t'])
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            if !name.is_empty() {
                return Some(name);
            }
        }
    }
    None
}

/// Python spells some encodings differently from the WHATWG labels encoding_rs knows.
fn python_to_whatwg_label(label: &str) -> String {
    let lower = label.to_ascii_lowercase().replace('_', "-");
    match lower.as_str() {
        "latin-1" | "iso-latin-1" | "iso8859-1" | "latin" | "l1" | "cp819" => "latin1".to_string(),
        "utf-8-sig" | "utf8-sig" => "utf-8".to_string(),
        other => other
            .strip_prefix("iso8859-")
            .map_or(other.to_string(), |n| format!("iso-8859-{n}")),
    }
}

fn trim_start(line: &[u8]) -> &[u8] {
    let start = line
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\x0c'))
        .unwrap_or(line.len());
    &line[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin1_cookie_decodes() {
        let bytes = b"# -*- coding: latin_1 -*-\nname = '\xe9'\nimport json\n";
        let decoded = decode(bytes);
        assert!(decoded.text.contains("name = '\u{e9}'"));
        assert!(decoded.lossy.is_none());
    }

    #[test]
    fn bom_is_stripped() {
        let decoded = decode(b"\xEF\xBB\xBFimport os\n");
        assert_eq!(decoded.text, "import os\n");
    }

    #[test]
    fn cookie_on_second_line_after_shebang() {
        let bytes = b"#!/usr/bin/env python\n# vim: set fileencoding=koi8-r :\nx = '\xc1'\n";
        let decoded = decode(bytes);
        assert!(decoded.text.contains("x = '\u{430}'"), "{}", decoded.text);
    }

    #[test]
    fn invalid_utf8_without_cookie_is_lossy_not_fatal() {
        let decoded = decode(b"import os\nx = '\xff'\n");
        assert!(decoded.text.starts_with("import os"));
        assert!(decoded.lossy.is_some());
    }
}
