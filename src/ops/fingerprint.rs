//! The fingerprint of an error: its text with the parts that vary from event to event replaced,
//! so that one outage's dead letters fall into one group.

/// The fingerprint of `last_error`: the text with every run of whitespace made one space, and
/// each variable part replaced by a placeholder: a UUID by `<uuid>`, a quoted value (`'…'`,
/// `"…"` or `` `…` ``, opened after a non-word character and closed before one) by `<q>`, a
/// hexadecimal word (`0x1f`, or 8 or more hex digits among which a digit and a letter) by
/// `<hex>`, and every run of digits by `<n>`. The kind's prefix (`retryable: `) is kept, so
/// failures of different kinds never share a fingerprint.
///
/// Errors that differ only in such parts (ids, addresses, ports, counts, timestamps, error
/// codes) share a fingerprint.
///
/// ```
/// use sea_orm_outbox::ops::fingerprint;
/// assert_eq!(
///     fingerprint("retryable: broker 10.0.0.7:10911 busy, msgId 7F0000010B2A18B4AAC2\n  for 'ORD-42'"),
///     "retryable: broker <n>.<n>.<n>.<n>:<n> busy, msgId <hex> for <q>"
/// );
/// ```
pub fn fingerprint(last_error: &str) -> String {
    let chars: Vec<char> = last_error.chars().collect();
    let mut out = String::with_capacity(last_error.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let after_word = i > 0 && is_word(chars[i - 1]);
        if c.is_whitespace() {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if !out.is_empty() && i < chars.len() {
                out.push(' ');
            }
            continue;
        }
        if matches!(c, '\'' | '"' | '`') && !after_word {
            if let Some(end) = closing_quote(&chars, i) {
                out.push_str("<q>");
                i = end + 1;
                continue;
            }
        }
        if is_word(c) && !after_word {
            let end = chars[i..]
                .iter()
                .position(|&c| !is_word(c) && c != '-')
                .map_or(chars.len(), |n| i + n);
            if is_uuid(&chars[i..end]) {
                out.push_str("<uuid>");
                i = end;
                continue;
            }
            let word_end = chars[i..]
                .iter()
                .position(|&c| !is_word(c))
                .map_or(chars.len(), |n| i + n);
            if is_hex_word(&chars[i..word_end]) {
                out.push_str("<hex>");
                i = word_end;
                continue;
            }
        }
        if c.is_ascii_digit() {
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            out.push_str("<n>");
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// ASCII letters and digits: the characters of a word.
fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// The index of the quote closing the one at `open`: the next same quote character that no
/// word character follows; `None` when there is none.
fn closing_quote(chars: &[char], open: usize) -> Option<usize> {
    let q = chars[open];
    (open + 1..chars.len())
        .find(|&j| chars[j] == q && chars.get(j + 1).is_none_or(|&c| !is_word(c)))
}

/// Whether `s` is a UUID: 8-4-4-4-12 hex digits joined by `-`.
fn is_uuid(s: &[char]) -> bool {
    let groups: Vec<&[char]> = s.split(|&c| c == '-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.iter().all(char::is_ascii_hexdigit))
}

/// Whether the word `w` is a hexadecimal value: `0x` and hex digits, or at least 8 hex digits
/// among which a digit and a letter (so that neither a plain number nor a word such as
/// `deadbeef` or `accepted` is taken).
fn is_hex_word(w: &[char]) -> bool {
    if let ['0', 'x' | 'X', rest @ ..] = w {
        return !rest.is_empty() && rest.iter().all(char::is_ascii_hexdigit);
    }
    w.len() >= 8
        && w.iter().all(char::is_ascii_hexdigit)
        && w.iter().any(char::is_ascii_digit)
        && w.iter().any(char::is_ascii_alphabetic)
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn variable_parts_are_replaced() {
        for (a, b) in [
            (
                "retryable: send failed: connection refused; broker 127.0.0.1:10911",
                "retryable: send failed: connection refused; broker 10.2.0.17:20911",
            ),
            (
                "permanent: body of event 42 is 5000000 bytes",
                "permanent: body of event 1234567 is 4194305 bytes",
            ),
            (
                "retryable: request 3f2b8c1e-9d4a-4b6f-8e2a-0c1d2e3f4a5b timed out",
                "retryable: request 00000000-0000-0000-0000-000000000000 timed out",
            ),
            (
                "retryable: no route for topic 'ORDERS_a1' (key \"K-1\")",
                "retryable: no route for topic 'PAYMENTS' (key \"order 7\")",
            ),
            (
                "send failed:\n  caused by: x",
                "send failed: caused by:   x ",
            ),
            ("msg 0x1F2e", "msg 0xdead"),
            (
                "msgId AC11000100002A9F0000000000000042",
                "msgId 7F0000010B2A18B4AAC2",
            ),
        ] {
            assert_eq!(fingerprint(a), fingerprint(b), "{a:?} / {b:?}");
        }
        for (a, b) in [
            ("retryable: broker busy", "permanent: broker busy"),
            ("retryable: broker busy", "broker busy"),
            ("retryable: broker busy", "retryable: broker gone"),
        ] {
            assert_ne!(fingerprint(a), fingerprint(b), "{a:?} / {b:?}");
        }
    }

    #[test]
    fn words_and_apostrophes_stay() {
        assert_eq!(
            fingerprint("it's the broker's fault: accepted deadbeef utf8 'unclosed"),
            "it's the broker's fault: accepted deadbeef utf<n> 'unclosed"
        );
        assert_eq!(fingerprint("id=42, ids [1,2]"), "id=<n>, ids [<n>,<n>]");
        assert_eq!(fingerprint(""), "");
        assert_eq!(fingerprint("  x  "), "x");
        assert_eq!(fingerprint("ünïcödé 7"), "ünïcödé <n>");
    }
}
