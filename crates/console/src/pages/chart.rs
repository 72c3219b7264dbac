//! The overview's chart: attempts per minute by outcome, as SVG bars.

use serde::Serialize;

/// One bar of the overview's chart (SVG units).
#[derive(Serialize)]
struct Bar {
    x: f64,
    ok: i64,
    failed: i64,
    ok_y: f64,
    ok_h: f64,
    failed_y: f64,
    failed_h: f64,
    label: String,
}

#[derive(Serialize)]
pub(super) struct Chart {
    width: u32,
    height: u32,
    bar: f64,
    bars: Vec<Bar>,
    peak: i64,
    /// The first minute (RFC 3339), under the bars' left end.
    first: String,
    total_ok: i64,
    total_failed: i64,
}

/// Stacked bars, failures on top, scaled to the busiest minute.
pub(super) fn chart(minutes: &[hookfleet_core::store::deliveries::MinuteCount]) -> Chart {
    const W: u32 = 600;
    const H: u32 = 120;
    let slot = W as f64 / minutes.len().max(1) as f64;
    let peak = minutes.iter().map(|m| m.ok + m.failed).max().unwrap_or(0);
    let scale = if peak > 0 {
        H as f64 / peak as f64
    } else {
        0.0
    };
    let bars = minutes
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ok_h = m.ok as f64 * scale;
            let failed_h = m.failed as f64 * scale;
            Bar {
                x: i as f64 * slot,
                ok: m.ok,
                failed: m.failed,
                ok_y: H as f64 - ok_h,
                ok_h,
                failed_y: H as f64 - ok_h - failed_h,
                failed_h,
                label: m.minute.format("%H:%M UTC").to_string(),
            }
        })
        .collect();
    Chart {
        width: W,
        height: H,
        bar: (slot * 0.8).max(1.0),
        bars,
        peak,
        first: minutes
            .first()
            .map(|m| m.minute.to_rfc3339())
            .unwrap_or_default(),
        total_ok: minutes.iter().map(|m| m.ok).sum(),
        total_failed: minutes.iter().map(|m| m.failed).sum(),
    }
}
