//! JSON helpers for values that end up in PostgreSQL.

use serde_json::Value;

/// True when any string or key in `value` contains U+0000, which PostgreSQL `text` and
/// `jsonb` cannot store.
pub fn contains_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

/// The length of `value` serialized compactly, without building the text.
pub fn serialized_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Replaces U+0000 with U+FFFD in every string and key, so a value a tool produced can
/// always be stored.
pub fn replace_nul(value: &mut Value) {
    match value {
        Value::String(s) if s.contains('\0') => *s = s.replace('\0', "\u{fffd}"),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) if map.keys().any(|k| k.contains('\0')) => {
            let old = std::mem::take(map);
            for (k, mut v) in old {
                replace_nul(&mut v);
                map.insert(k.replace('\0', "\u{fffd}"), v);
            }
        }
        Value::Object(map) => map.values_mut().for_each(replace_nul),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_and_replaces_nul() {
        let mut v = json!({"a": ["x", {"b\u{0}": "c\u{0}d"}], "n": 1});
        assert!(contains_nul(&v));
        replace_nul(&mut v);
        assert!(!contains_nul(&v));
        assert_eq!(v, json!({"a": ["x", {"b\u{fffd}": "c\u{fffd}d"}], "n": 1}));
        assert!(!contains_nul(&json!({"ok": "fine"})));
    }

    #[test]
    fn measures_the_compact_text() {
        let v = json!({"a": ["x\"y", 1.5, null], "é": true});
        assert_eq!(serialized_len(&v), serde_json::to_string(&v).unwrap().len());
    }
}
