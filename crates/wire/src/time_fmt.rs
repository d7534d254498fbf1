//! Timestamps on the wire: RFC 3339 in UTC with millisecond precision, always with `Z`.

use time::{OffsetDateTime, UtcOffset, format_description::FormatItem, macros::format_description};

const FORMAT: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

pub fn rfc3339(t: OffsetDateTime) -> String {
    t.to_offset(UtcOffset::UTC)
        .format(FORMAT)
        // Only years outside 0..=9999 fail to format, and PostgreSQL timestamps in
        // this service are always "now" plus or minus hours.
        .unwrap_or_else(|_| String::from("1970-01-01T00:00:00.000Z"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn formats_utc_millis() {
        assert_eq!(
            rfc3339(datetime!(2026-08-21 12:30:00.123456 +02:00)),
            "2026-08-21T10:30:00.123Z"
        );
    }
}
