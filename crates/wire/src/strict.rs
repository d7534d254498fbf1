//! Strict JSON for request bodies: bounded nesting, and no duplicate object keys.
//!
//! Duplicate keys are refused rather than resolved (serde_json keeps the last one, other
//! parsers the first): a body that a proxy and this server would read differently must
//! not be read at all.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Limits on one body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonLimits {
    /// Deepest nesting of arrays and objects accepted.
    pub max_depth: usize,
}

impl Default for JsonLimits {
    fn default() -> Self {
        Self { max_depth: 64 }
    }
}

/// Why a body is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    TooDeep { max_depth: usize },
    Invalid(String),
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooDeep { max_depth } => {
                write!(f, "JSON is nested deeper than {max_depth} levels")
            }
            Self::Invalid(e) => f.write_str(e),
        }
    }
}

/// Parses `body` as one JSON value under `limits`.
pub fn parse(body: &[u8], limits: JsonLimits) -> Result<Value, JsonError> {
    // Checked before parsing, so a hostile body costs one linear scan and nothing else.
    if depth(body) > limits.max_depth {
        return Err(JsonError::TooDeep {
            max_depth: limits.max_depth,
        });
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = StrictValue
        .deserialize(&mut deserializer)
        .map_err(|e| JsonError::Invalid(e.to_string()))?;
    deserializer
        .end()
        .map_err(|e| JsonError::Invalid(e.to_string()))?;
    Ok(value)
}

/// The deepest nesting of `[` and `{` outside strings. Invalid JSON gives some number; the
/// parser then rejects it anyway.
fn depth(body: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate object key {key:?}"
                )));
            }
            let value = map.next_value_seed(StrictValue)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> JsonLimits {
        JsonLimits { max_depth: 4 }
    }

    #[test]
    fn parses_plain_json() {
        assert_eq!(
            parse(br#"{"a":[1,{"b":"[{"}],"c":null}"#, limits()),
            Ok(json!({"a":[1,{"b":"[{"}],"c":null}))
        );
    }

    #[test]
    fn refuses_duplicates_depth_and_trailing_data() {
        assert!(matches!(
            parse(br#"{"a":1,"a":2}"#, limits()),
            Err(JsonError::Invalid(e)) if e.contains("duplicate")
        ));
        assert!(matches!(
            parse(br#"{"x":{"a":1,"a":2}}"#, limits()),
            Err(JsonError::Invalid(_))
        ));
        assert_eq!(
            parse(b"[[[[[1]]]]]", limits()),
            Err(JsonError::TooDeep { max_depth: 4 })
        );
        // Brackets inside strings (and escaped quotes) do not count.
        assert!(parse(br#"["[[[[[[\"[[[["]"#, limits()).is_ok());
        assert!(parse(b"{} {}", limits()).is_err());
        assert!(parse(b"1e400", limits()).is_err());
        assert!(parse(b"\"\xff\"", limits()).is_err());
    }
}
