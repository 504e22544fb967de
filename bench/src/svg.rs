//! A small SVG line chart: enough for "release rate / core P99 / queue length over time", with no font or
//! system library behind it.

use std::fmt::Write;

/// One line of a chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// Renders the series on shared axes; `hline` draws a dashed reference (a target).
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series], hline: Option<(f64, &str)>) -> String {
    let (w, h) = (900.0, 360.0);
    let (left, right, top, bottom) = (70.0, 20.0, 40.0, 50.0);
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(hline.map(|h| h.0));
    let x_max = xs.fold(1.0f64, f64::max);
    let y_max = ys.fold(1.0f64, f64::max) * 1.1;
    let sx = |x: f64| left + x / x_max * (w - left - right);
    let sy = |y: f64| h - bottom - y / y_max * (h - top - bottom);
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>
"##,
        w / 2.0,
        esc(title)
    );
    for i in 0..=5 {
        let y = y_max * i as f64 / 5.0;
        let _ = writeln!(
            out,
            r##"<line x1="{left}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - right,
            left - 6.0,
            sy(y) + 4.0,
            fmt_num(y),
            py = sy(y)
        );
        let x = x_max * i as f64 / 5.0;
        let _ = writeln!(out, r##"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"##, sx(x), h - bottom + 18.0, fmt_num(x));
    }
    let _ = writeln!(
        out,
        r##"<line x1="{left}" x2="{left}" y1="{top}" y2="{}" stroke="#333"/><line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#333"/>"##,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    let _ = writeln!(out, r##"<text x="{}" y="{}" text-anchor="middle">{}</text>"##, w / 2.0, h - 10.0, esc(x_label));
    let _ = writeln!(
        out,
        r##"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"##,
        h / 2.0,
        h / 2.0,
        esc(y_label)
    );
    if let Some((y, label)) = hline {
        let _ = writeln!(
            out,
            r##"<line x1="{left}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" fill="#c00" text-anchor="end">{}</text>"##,
            w - right,
            w - right - 4.0,
            sy(y) - 4.0,
            esc(label),
            py = sy(y)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<String> = s.points.iter().map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y))).collect();
        let _ = writeln!(out, r##"<polyline fill="none" stroke="{}" stroke-width="1.6" points="{}"/>"##, s.color, pts.join(" "));
        let _ = writeln!(
            out,
            r##"<rect x="{}" y="{}" width="12" height="3" fill="{}"/><text x="{}" y="{}">{}</text>"##,
            left + 10.0 + i as f64 * 180.0,
            top - 8.0,
            s.color,
            left + 26.0 + i as f64 * 180.0,
            top - 4.0,
            esc(s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn fmt_num(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_and_the_target() {
        let svg = line_chart(
            "P99",
            "s",
            "ms",
            &[Series { name: "p99", color: "#06c", points: vec![(0.0, 10.0), (1.0, 120.0)] }],
            Some((100.0, "target")),
        );
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains("target"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
