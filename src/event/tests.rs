use super::*;

#[test]
fn validates_fields() {
    let limits = EventLimits::default();
    assert!(NewEvent::raw("A", "T", "{}").validate(&limits).is_ok());
    assert_eq!(
        NewEvent::raw(" ", "T", "{}").validate(&limits),
        Err(EventError::Empty { field: "biz_no" })
    );
    assert_eq!(
        NewEvent::raw("A", "", "{}").validate(&limits),
        Err(EventError::Empty {
            field: "event_type"
        })
    );
    assert!(matches!(
        NewEvent::raw("x".repeat(65), "T", "{}").validate(&limits),
        Err(EventError::TooLong {
            field: "biz_no",
            len: 65,
            max: 64
        })
    ));
    // 64 multi-byte characters fit a varchar(64).
    assert!(NewEvent::raw("é".repeat(64), "T", "{}")
        .validate(&limits)
        .is_ok());
    let small = EventLimits::new(3);
    assert!(matches!(
        NewEvent::raw("A", "T", "1234").validate(&small),
        Err(EventError::PayloadTooLarge { size: 4, max: 3 })
    ));
    assert_eq!(
        NewEvent::raw("A\0B", "T", "{}").validate(&limits),
        Err(EventError::NulByte { field: "biz_no" })
    );
    assert_eq!(
        NewEvent::raw("A", "T", "{\0}").validate(&limits),
        Err(EventError::NulByte { field: "payload" })
    );
}

#[test]
fn validates_headers() {
    let limits = EventLimits::default();
    let ok = NewEvent::raw("A", "T", "{}")
        .header("tenant", "acme")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .header("x.y-z_1", "ünïcödé and spaces");
    assert!(ok.validate(&limits).is_ok());
    assert_eq!(
        ok.headers_json().as_deref(),
        Some(
            r#"{"tenant":"acme","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x.y-z_1":"ünïcödé and spaces"}"#
        )
    );
    assert_eq!(NewEvent::raw("A", "T", "{}").headers_json(), None);
    let refused = |e: NewEvent| match e.validate(&limits) {
        Err(EventError::InvalidHeader { name, reason }) => (name, reason),
        other => panic!("expected InvalidHeader, got {other:?}"),
    };
    for name in ["", "a b", "é", "a:b", "eventId", "eventType", "bizNo"] {
        let (n, reason) = refused(NewEvent::raw("A", "T", "{}").header(name, "v"));
        assert_eq!(n, name, "{reason}");
    }
    // A broker's reserved names and prefixes count only under its limits.
    let broker = EventLimits::default()
        .with_reserved_header_names(&["KEYS", "DELAY"])
        .with_reserved_header_prefixes(&["__"]);
    for name in ["KEYS", "DELAY", "__internal.x"] {
        let event = NewEvent::raw("A", "T", "{}").header(name, "v");
        assert!(event.validate(&limits).is_ok(), "{name}");
        assert!(
            matches!(
                event.validate(&broker),
                Err(EventError::InvalidHeader { .. })
            ),
            "{name}"
        );
    }
    let (n, _) = refused(NewEvent::raw("A", "T", "{}").header("n".repeat(65), "v"));
    assert_eq!(n.len(), 64);
    for value in ["a\u{1}b", "a\u{2}", "line\nbreak", "nul\0"] {
        let (_, reason) = refused(NewEvent::raw("A", "T", "{}").header("h", value));
        assert!(reason.contains("control character"), "{reason}");
    }
    let big = NewEvent::raw("A", "T", "{}")
        .headers_from((0..20).map(|i| (format!("h{i}"), "v".repeat(1000))));
    assert!(big
        .validate(&EventLimits::default().with_max_headers_bytes(64 * 1024))
        .is_ok());
    assert!(matches!(
        big.validate(&limits),
        Err(EventError::HeadersTooLarge {
            max: EventLimits::DEFAULT_MAX_HEADERS_BYTES,
            ..
        })
    ));
}
