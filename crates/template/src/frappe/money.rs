//! `fmt_money`: an amount with Frappe's number formats and the currency's symbol, without the
//! database Frappe reads a currency's symbol and fraction units from: the symbols of the
//! currencies a Frappe site is set up with ([`symbol_of`]), and the code for the others, as
//! Frappe writes a currency that has none.

use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::numbers::{float_of, precision_of, py_float_repr, py_round, round_with, Rounding};
use super::signature::Bound;
use super::text::py_str_any;

/// Frappe's number formats: (decimal mark, group separator, precision).
fn number_format_info(format: &str) -> (&'static str, &'static str, usize) {
    match format {
        "#.###,##" => (",", ".", 2),
        "# ###.##" => (".", " ", 2),
        "# ###,##" => (",", " ", 2),
        "#'###.##" => (".", "'", 2),
        "#, ###.##" => (".", ", ", 2),
        "#,###.###" => (".", ",", 3),
        "#.###" => ("", ".", 0),
        "#,###" => ("", ",", 0),
        "#.########" => (".", "", 8),
        // "#,###.##", "#,##,###.##" and anything unknown.
        _ => (".", ",", 2),
    }
}

/// The symbol a Frappe site shows for the currency `code` (its Currency
/// records, made at setup for each country's currency); None for one it
/// has no symbol for (Frappe then writes the code: RUB, CNY, KRW, …) or
/// that we do not list.
fn symbol_of(code: &str) -> Option<&'static str> {
    Some(match code {
        "USD" | "AUD" | "CAD" | "NZD" | "SGD" | "HKD" | "MXN" | "ARS" | "CLP" | "COP" => "$",
        "EUR" => "€",
        "GBP" => "£",
        "INR" => "₹",
        "JPY" => "¥",
        "BRL" => "R$",
        "ZAR" => "R",
        "CHF" => "Fr",
        "SEK" | "NOK" | "DKK" => "kr",
        "PLN" => "zł",
        "CZK" => "Kč",
        "HUF" => "Ft",
        "TRY" => "₺",
        "ILS" => "₪",
        "UAH" => "₴",
        "NGN" => "₦",
        "GHS" => "₵",
        "KES" | "UGX" => "Sh",
        "PHP" => "₱",
        "THB" => "฿",
        "IDR" => "Rp",
        "MYR" => "RM",
        "PKR" | "NPR" => "₨",
        "LKR" => "Rs",
        "BDT" => "৳",
        "AED" => "د.إ",
        "SAR" => "ر.س",
        _ => return None,
    })
}

/// Python's `x % 1.0` (the result takes the divisor's sign).
fn py_mod1(x: f64) -> f64 {
    let m = x % 1.0;
    if m != 0.0 && m < 0.0 {
        m + 1.0
    } else {
        m
    }
}

/// `fmt_money(amount, precision=None, currency=None, format=None)`: the
/// amount with group separators (`1,234.50`), the currency's symbol (or
/// code) in front when given.
pub(super) fn fmt_money(b: &Bound) -> Result<Value, Error> {
    let number_format = match b.given(3).filter(|v| v.is_true()) {
        Some(v) => py_str_any(b, v)?,
        None => "#,###.##".to_string(),
    };
    let (decimal_mark, group_separator, format_precision) = number_format_info(&number_format);
    let mut precision = b.opt(1).map_or(format_precision, precision_of);
    let currency = match b.given(2).filter(|v| v.is_true()) {
        Some(v) => Some(py_str_any(b, v)?),
        None => None,
    };

    let v = b.value(0);
    let amount = match v.kind() {
        ValueKind::Undefined | ValueKind::None => 0.0,
        ValueKind::String => float_of(&v)
            .and_then(|x| round_with(Rounding::Bankers, x, precision))
            .map_or(0.0, |(x, _)| x),
        ValueKind::Bool | ValueKind::Number => float_of(&v).unwrap_or(0.0),
        kind => return Err(b.fail(format!("expected a number, not {kind}"))),
    };
    if !amount.is_finite() {
        return Err(b.fail(format!("cannot format {}", py_float_repr(amount))));
    }

    // Above two places Frappe drops trailing zeros, down to two.
    if !decimal_mark.is_empty() && precision > 2 {
        let fraction = py_float_repr(py_round(py_mod1(amount), precision));
        let decimals = fraction
            .split_once('.')
            .map_or(fraction.as_str(), |(_, d)| d);
        let count = decimals.chars().count();
        if count < 3 {
            // Frappe reads the currency's fraction units from its database;
            // without one, 100 (two places).
            precision = if currency.is_some() {
                2
            } else {
                format_precision
            };
        } else if count < precision {
            precision = count;
        }
    }

    let fixed = format!("{:.*}", precision, py_round(amount, precision));
    let negative = fixed.parse::<f64>().is_ok_and(|x| x < 0.0);
    let unsigned = fixed.trim_start_matches('-');
    let (integer, decimals) = unsigned.split_once('.').unwrap_or((unsigned, ""));

    let group = if number_format == "#,##,###.##" { 2 } else { 3 };
    let mut groups: Vec<&str> = Vec::new();
    let mut rest = integer;
    if rest.len() > 3 {
        groups.push(&rest[rest.len() - 3..]);
        rest = &rest[..rest.len() - 3];
        while rest.len() > group {
            groups.push(&rest[rest.len() - group..]);
            rest = &rest[..rest.len() - group];
        }
    }
    groups.push(rest);
    groups.reverse();

    let mut text = groups.join(group_separator);
    if precision > 0 && !decimal_mark.is_empty() {
        text.push_str(decimal_mark);
        text.push_str(decimals);
    }
    if negative && text != "0" {
        text.insert(0, '-');
    }
    if let Some(currency) = currency {
        let shown = symbol_of(&currency).unwrap_or(&currency);
        text = format!("{shown} {text}");
    }
    Ok(Value::from(text))
}

#[cfg(test)]
mod tests {
    use crate::frappe::testing::assert_renders;

    /// Expected values computed with python3 running Frappe's fmt_money
    /// (fraction units 100; the symbols a site's Currency records hold).
    #[test]
    fn fmt_money_matches_frappe() {
        assert_renders(&[
            ("{{ utils.fmt_money(1234.5) }}", "1,234.50"),
            (r#"{{ utils.fmt_money(1234.5, currency="USD") }}"#, "$ 1,234.50"),
            (r#"{{ utils.fmt_money(1234.5, currency="EUR") }}"#, "€ 1,234.50"),
            (r#"{{ utils.fmt_money(1234.5, currency="INR") }}"#, "₹ 1,234.50"),
            // No symbol on a Frappe site (or none we know): the code.
            (r#"{{ utils.fmt_money(1234.5, currency="RUB") }}"#, "RUB 1,234.50"),
            (r#"{{ utils.fmt_money(1234.5, currency="XAU") }}"#, "XAU 1,234.50"),
            ("{{ utils.fmt_money(-1234.5) }}", "-1,234.50"),
            ("{{ utils.fmt_money(0) }} {{ utils.fmt_money(none) }} {{ utils.fmt_money(-0.001) }}", "0.00 0.00 0.00"),
            (r##"{{ utils.fmt_money(1234567.891, format="#,##,###.##") }}"##, "12,34,567.89"),
            (r##"{{ utils.fmt_money(1234567.891, format="#.###,##") }}"##, "1.234.567,89"),
            ("{{ utils.fmt_money(1.5, 3) }}", "1.50"),
            ("{{ utils.fmt_money(1.2345, 3) }}", "1.234"),
            ("{{ utils.fmt_money(1.23456, 5) }}", "1.23456"),
            ("{{ utils.fmt_money(1.234, 5) }}", "1.234"),
            ("{{ utils.fmt_money(1.00001, 5) }}", "1.00001"),
            (r#"{{ utils.fmt_money(1.5, 3, "KWD") }}"#, "KWD 1.50"),
            (r#"{{ utils.fmt_money("1,234.567") }}"#, "1,234.57"),
            ("{{ utils.fmt_money(999.999) }}", "1,000.00"),
            ("{{ utils.fmt_money(1234.5, 0) }}", "1,234"),
            (r##"{{ utils.fmt_money(1234567.5, format="#,###") }}"##, "1,234,568"),
            (r##"{{ utils.fmt_money(12.5, 8, format="#.########") }}"##, "12.50000000"),
        ]);
    }
}
