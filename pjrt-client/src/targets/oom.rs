//! Reading the numbers out of the accelerator compilers' out-of-memory
//! messages (libtpu: HBM / VMEM / SMEM; XLA GPU: shared memory), for the
//! named [`crate::Error::OutOfMemory`] of a target compile.

/// What a compiler said did not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oom {
    /// Memory space (`HBM`, `vmem`, `smem`, `shared memory`).
    pub space: String,
    /// Needed size as the compiler wrote it (or `?`).
    pub needed: String,
    /// Available size as the compiler wrote it (or `?`).
    pub available: String,
}

/// Text inside the first `(...)` after `key` in `s`.
fn paren_after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let rest = &s[s.find(key)? + key.len()..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    Some(&rest[open + 1..close])
}

/// `key=VALUE` (VALUE up to `,`, `)` or whitespace).
fn value_after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let rest = &s[s.find(key)? + key.len()..];
    let end = rest.find([',', ')', ' ', '\n']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Recognizes a memory-capacity failure in a compiler message.
pub fn parse(msg: &str) -> Option<Oom> {
    // libtpu: "... HLO temporaries (23.88G) exceeds available HBM (15.75G)"
    //      or "Ran out of memory in memory space hbm. Used 23.88G of 15.75G hbm."
    if let Some(avail) = paren_after(msg, "exceeds available HBM") {
        let needed = msg
            .find("exceeds available HBM")
            .and_then(|i| {
                let head = &msg[..i];
                let close = head.rfind(')')?;
                let open = head[..close].rfind('(')?;
                Some(head[open + 1..close].to_string())
            })
            .unwrap_or_else(|| "?".into());
        return Some(Oom {
            space: "HBM".into(),
            needed,
            available: avail.to_string(),
        });
    }
    if let Some(i) = msg.find("Ran out of memory in memory space ") {
        let rest = &msg[i + "Ran out of memory in memory space ".len()..];
        let space: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
        let (needed, available) = rest
            .find("Used ")
            .and_then(|u| {
                let r = &rest[u + 5..];
                let (a, b) = r.split_once(" of ")?;
                Some((a.to_string(), b.split_whitespace().next()?.to_string()))
            })
            .unwrap_or(("?".into(), "?".into()));
        return Some(Oom {
            space,
            needed,
            available,
        });
    }
    // Mosaic (Pallas TPU): "... would exceed memory (size=134217728) ... space=vmem"
    if msg.contains("would exceed memory") {
        let space = value_after(msg, "space=").unwrap_or("vmem").to_string();
        let available = value_after(msg, "size=")
            .and_then(|v| v.parse::<i64>().ok())
            .map_or("?".into(), human_bytes);
        let needed = value_after(msg, "requested=")
            .or_else(|| value_after(msg, "allocation_size="))
            .unwrap_or("?")
            .to_string();
        return Some(Oom {
            space,
            needed,
            available,
        });
    }
    // XLA GPU / Triton: shared memory.
    let lower = msg.to_ascii_lowercase();
    if lower.contains("shared memory")
        && (lower.contains("exceed")
            || lower.contains("out of resource")
            || lower.contains("too much"))
    {
        return Some(Oom {
            space: "shared memory".into(),
            needed: "?".into(),
            available: "?".into(),
        });
    }
    None
}

/// `1536` → `1.5 KiB`.
pub fn human_bytes(b: i64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tpu_hbm_and_vmem_messages() {
        let o = parse("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. HLO temporaries (23.88G) exceeds available HBM (15.75G)").unwrap();
        assert_eq!(
            (o.space.as_str(), o.needed.as_str(), o.available.as_str()),
            ("HBM", "23.88G", "15.75G")
        );
        let o =
            parse("Mosaic failed: would exceed memory (size=134217728) for allocation space=vmem")
                .unwrap();
        assert_eq!(
            (o.space.as_str(), o.available.as_str()),
            ("vmem", "128.00 MiB")
        );
        assert!(parse("some other failure").is_none());
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }
}
