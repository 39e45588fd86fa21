//! Cursor pagination shared by every list method. Cursors are opaque to clients: base64url of
//! the offset, so a bad one is recognisable and answered `-32602`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::protocol::{ErrorData, errors};

#[derive(Deserialize, Default)]
pub(super) struct ListParams {
    #[serde(default)]
    pub cursor: Option<String>,
}

/// The page of `items` that `cursor` names, and the cursor of the next page.
pub(super) fn page<'a, T>(
    items: &'a [T],
    p: Option<&RawValue>,
    size: usize,
) -> Result<(&'a [T], Option<String>), ErrorData> {
    let ListParams { cursor } = super::params(p)?;
    let start = match cursor.as_deref() {
        None | Some("") => 0,
        Some(c) => {
            decode(c).ok_or_else(|| errors::invalid_params(format!("Invalid cursor: {c}")))?
        }
    };
    if start > items.len() {
        return Err(errors::invalid_params(
            "Invalid cursor: past the end of the list",
        ));
    }
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| URL_SAFE_NO_PAD.encode(format!("o{end}")));
    Ok((&items[start..end], next))
}

fn decode(cursor: &str) -> Option<usize> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&bytes)
        .ok()?
        .strip_prefix('o')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_their_cursors_and_reject_forged_ones() {
        let items: Vec<u32> = (0..5).collect();
        let (p1, c1) = page(&items, None, 2).unwrap();
        assert_eq!(p1, &[0, 1]);
        let raw = RawValue::from_string(format!("{{\"cursor\":\"{}\"}}", c1.unwrap())).unwrap();
        let (p2, c2) = page(&items, Some(&raw), 2).unwrap();
        assert_eq!(p2, &[2, 3]);
        let raw = RawValue::from_string(format!("{{\"cursor\":\"{}\"}}", c2.unwrap())).unwrap();
        let (p3, c3) = page(&items, Some(&raw), 2).unwrap();
        assert_eq!((p3, c3), (&[4][..], None));
        let bad = RawValue::from_string("{\"cursor\":\"!!\"}".into()).unwrap();
        assert_eq!(page(&items, Some(&bad), 2).unwrap_err().code.0, -32602);
    }
}
