// SVG plots for the report, with no plotting dependency: line charts (alone or stacked in
// panels), a grid of heatmap panels with one shared colour scale, and grouped bars, each
// bar a stack of segments or a single value. Plain data in, one complete standalone
// SVG 1.1 document out.
//
// Output is deterministic: numbers are written with std::to_chars (no locale), coordinates
// with at most two decimals, tick labels with the decimals their step needs; the same spec
// gives the same bytes on every run and compiler. All text (titles, labels, names) is
// XML-escaped (see detail::escape for control characters and bytes that are not UTF-8).
//
// Errors: a spec that cannot be drawn throws std::invalid_argument whose message names the
// function, the problem and the value, e.g.
//   svg::line_chart: series "LRU" has 5 x values but 4 y values
//
// Sizes: a heatmap cell costs one <rect> (about 40 bytes) only when its value is non-zero,
// and runs of equal colour in a row share one <rect>; 24 panels x 32 x 16 dense cells come
// to about 0.5 MB at worst. A heatmap grid takes at most max_heatmap_cells cells in all.
//
// Element ids (clip paths, patterns, the colour gradient) are unique within one document
// only: inline two documents in one HTML page and they may collide (an <img> is fine).
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moepolicy::examples::svg {

enum class line_style { solid, dashed };
enum class axis_scale { linear, log2, log10 };

/// A closed interval of data values, lo < hi.
struct value_range {
  double lo = 0.0;
  double hi = 1.0;
};

/// One line of a line chart. x and y have the same length, at least one point. x values
/// are finite (and > 0 on a log axis); a NaN y is a gap: the line breaks there (a point
/// with no finite neighbour shows only with markers). Infinite y values are rejected.
struct series {
  std::string name{};
  std::vector<double> x{};
  std::vector<double> y{};
  line_style style = line_style::solid;
  bool markers = false;
  std::string colour{};  ///< "#rrggbb"; empty: the palette's colour for the series' index
};

struct line_chart_spec {
  std::string title{};
  std::string x_label{};  ///< on a log axis, " (log2 scale)" or " (log scale)" is appended
  std::string y_label{};
  axis_scale x_scale = axis_scale::linear;  ///< the y axis is always linear
  std::optional<value_range> x_range{};     ///< empty: the data's x range
  std::optional<value_range> y_range{};     ///< empty: the data's y range, widened to nice ticks
  bool y_include_zero = true;               ///< automatic y range only: keep 0 in the range
  std::vector<series> lines{};              ///< at least one; the legend lists them in order
  double width = 640;                       ///< px, at least 240; grows to fit a wide legend
  double height = 400;                      ///< px, at least 160; grows to fit a tall legend
};

/// Line charts stacked top to bottom in one document under one title, with aligned plot
/// areas. Each panel's title is its subtitle; its width is ignored, its height used.
struct line_panels_spec {
  std::string title{};
  std::vector<line_chart_spec> panels{};
  double width = 640;
};

/// One small multiple: values[row][column], rows the experts (row 0 at the top), columns
/// the decode steps (column 0 at the left). Rectangular, non-empty, finite, >= 0.
struct heatmap_panel {
  std::string title{};  ///< e.g. "layer 0"
  std::vector<std::vector<double>> values{};
};

struct heatmap_grid_spec {
  std::string title{};
  std::string x_label = "decode step";
  std::string y_label = "expert";
  std::string value_label{};            ///< the colour bar's caption, e.g. "activations"
  std::vector<heatmap_panel> panels{};  ///< at least one; panels may differ in shape
  std::size_t columns = 0;              ///< panels per row; 0: about square, at most 8
  std::optional<double> max_value{};    ///< the top of the colour scale (> 0); larger values
                                        ///< clamp to it. Empty: the largest value (or 1 if none)
  double panel_width = 120;             ///< px of one panel's matrix, at least 8
  double panel_height = 120;
};

/// Grouped stacked bars: one group per category along x, one bar per entry of `bars` in
/// each group, each bar a stack of `segments` from the bottom up.
/// values[category][bar][segment], finite and >= 0. Segments are told apart by colour,
/// bars within a group by hatching (the first bar plain, then six kinds that repeat past
/// the seventh bar) and a letter under each bar when bars are at least 8 px wide, both
/// in the legend ("a: GPU+CPU"). Category labels thin out to every k-th when crowded.
struct stacked_bars_spec {
  std::string title{};
  std::string x_label{};
  std::string y_label{};
  std::vector<std::string> categories{};  ///< e.g. "0" .. "23" for MoE layers
  std::vector<std::string> bars{};        ///< e.g. systems
  std::vector<std::string> segments{};    ///< e.g. "GPU", "CPU", "NDP"; at least one
  std::vector<std::vector<std::vector<double>>> values{};
  std::optional<double> y_max{};  ///< empty: the tallest stack, widened to a nice tick
  double width = 0;               ///< px; 0: sized from the number of bars
  double height = 400;
};

/// Grouped bars of single values, each bar system its own colour: values[category][bar].
struct grouped_bars_spec {
  std::string title{};
  std::string x_label{};
  std::string y_label{};
  std::vector<std::string> categories{};
  std::vector<std::string> bars{};
  std::vector<std::vector<double>> values{};
  std::optional<double> y_max{};
  double width = 0;
  double height = 400;
};

/// The most cells (rows x columns over all panels) one heatmap_grid accepts.
inline constexpr std::size_t max_heatmap_cells = std::size_t{1} << 20;

namespace detail {

// ---------------------------------------------------------------------------------------
// Text and numbers.

/// Length of the UTF-8 sequence starting at s[i] when it encodes an XML 1.0 character,
/// else 0.
inline std::size_t utf8_char_length(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0Fu;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF) return 0;
  return n;
}

/// `s` as XML character data or attribute value: & < > " ' as entity references, control
/// characters (tab and newlines included) as a space, bytes that are not UTF-8 as '?'.
inline std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    switch (c) {
      case '&':
        out += "&amp;";
        ++i;
        continue;
      case '<':
        out += "&lt;";
        ++i;
        continue;
      case '>':
        out += "&gt;";
        ++i;
        continue;
      case '"':
        out += "&quot;";
        ++i;
        continue;
      case '\'':
        out += "&apos;";
        ++i;
        continue;
      default:
        break;
    }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      out += ' ';
      ++i;
      continue;
    }
    const std::size_t n = utf8_char_length(s, i);
    if (n == 0) {
      out += '?';
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

/// Estimated rendered width in px of `s` at `font_px` in a sans-serif face: per-character
/// advances a little above DejaVu Sans's (wider than Helvetica's or Arial's), so that
/// layouts leave room rather than overlap.
inline double text_width(std::string_view s, double font_px) {
  double em = 0;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u & 0xC0u) == 0x80u) continue;  // UTF-8 continuation byte
    if (u >= 0x80) {
      em += 0.9;
    } else if (c == 'm' || c == 'w' || c == 'M' || c == 'W') {
      em += 0.98;
    } else if (c >= 'A' && c <= 'Z') {
      em += 0.76;
    } else if (c == 'i' || c == 'j' || c == 'l' || c == 'f' || c == 't' || c == 'r' || c == 'I') {
      em += 0.42;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      em += 0.64;
    } else if (c == '+' || c == '=' || c == '<' || c == '>' || c == '~' || c == '#' || c == '%' || c == '&') {
      em += 0.86;
    } else {
      em += 0.42;  // space and punctuation
    }
  }
  return em * font_px;
}

/// The x at which to centre a text `w` px wide near `centre`, kept inside [lo, hi].
inline double centre_within(double centre, double w, double lo, double hi) {
  return std::max(lo + w / 2, std::min(centre, hi - w / 2));
}

/// `v` with `decimals` digits after the point, trailing zeros dropped ("12.5", "3", "0").
inline std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  std::array<char, 400> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::fixed, decimals);
  std::string s(buf.data(), r.ptr);
  if (decimals > 0 && s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

/// `v` with `precision` significant digits, like printf's %g ("0.25", "1e+06").
inline std::string general(double v, int precision = 6) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::general, precision);
  std::string s(buf.data(), r.ptr);
  if (s == "-0") s = "0";
  return s;
}

/// A coordinate in px: two decimals at most, clamped to +-1e6.
inline std::string num(double v) { return fixed(std::clamp(v, -1e6, 1e6), 2); }

[[noreturn]] inline void fail(std::string_view function, const std::string& problem) {
  std::string what = "svg::";
  what += function;
  what += ": ";
  what += problem;
  throw std::invalid_argument(what);
}

inline std::string in_quotes(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

// ---------------------------------------------------------------------------------------
// Colours.

struct rgb {
  int r = 0;
  int g = 0;
  int b = 0;
};

inline std::string hex(rgb c) {
  constexpr std::string_view digits = "0123456789abcdef";
  std::string s = "#";
  for (const int v : {c.r, c.g, c.b}) {
    const auto u = static_cast<unsigned>(std::clamp(v, 0, 255));
    s += digits[u >> 4];
    s += digits[u & 15u];
  }
  return s;
}

/// HSL (hue in degrees, saturation and lightness in [0, 1]) to 8-bit RGB.
inline rgb from_hsl(double hue, double sat, double light) {
  const double c = (1.0 - std::fabs(2.0 * light - 1.0)) * sat;
  const double hp = std::fmod(std::fmod(hue, 360.0) + 360.0, 360.0) / 60.0;
  const double x = c * (1.0 - std::fabs(std::fmod(hp, 2.0) - 1.0));
  const int sextant = std::clamp(static_cast<int>(hp), 0, 5);
  const std::array<std::array<double, 3>, 6> order = {
      {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}, {c, 0, x}}};
  const auto& o = order[static_cast<std::size_t>(sextant)];
  const double r = o[0];
  const double g = o[1];
  const double b = o[2];
  const double m = light - c / 2.0;
  const auto to8 = [m](double v) { return static_cast<int>(std::lround(std::clamp(v + m, 0.0, 1.0) * 255.0)); };
  return {to8(r), to8(g), to8(b)};
}

/// The categorical colour of series (or segment, or bar) `i`: well-separated hues first,
/// then the golden angle; dark enough to read on white.
inline std::string palette(std::size_t i) {
  constexpr std::array<double, 8> hues = {212, 28, 128, 352, 272, 186, 318, 48};
  const double hue = i < hues.size() ? hues[i] : 212.0 + 137.508 * static_cast<double>(i);
  const double light = (i < hues.size() && (hues[i] == 48 || hues[i] == 186)) ? 0.38 : 0.45;
  return hex(from_hsl(hue, 0.68, light));
}

/// The sequential scale of the heatmaps: t = 0 white to t = 1 dark blue, by lightness.
inline rgb sequential(double t) {
  t = std::clamp(t, 0.0, 1.0);
  return from_hsl(214.0, 0.30 + 0.50 * t, 1.0 - 0.80 * t);
}

inline bool is_hex_colour(std::string_view c) {
  if (c.size() != 7 || c[0] != '#') return false;
  return std::all_of(c.begin() + 1, c.end(), [](char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
  });
}

// ---------------------------------------------------------------------------------------
// The document.

inline constexpr double title_px = 14;
inline constexpr double label_px = 12;
inline constexpr double tick_px = 11;

inline void open_document(std::string& out, double width, double height, std::string_view title) {
  const std::string w = fixed(std::ceil(width), 0);
  const std::string h = fixed(std::ceil(height), 0);
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + w + "\" height=\"" + h +
         "\" viewBox=\"0 0 " + w + " " + h +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n";
  out += "<title>" + escape(title) + "</title>\n";
  out += "<rect width=\"" + w + "\" height=\"" + h + "\" fill=\"#ffffff\"/>\n";
}

inline void close_document(std::string& out) { out += "</svg>\n"; }

enum class anchor { start, middle, end };

/// One <text> element; `rotate` turns it -90 degrees about its anchor point.
inline void text(std::string& out, double x, double y, std::string_view s, anchor a, double px = tick_px,
                 bool bold = false, bool rotate = false, std::string_view cls = {}) {
  out += "<text";
  if (!cls.empty()) out += " class=\"" + std::string(cls) + "\"";
  out += " x=\"" + num(x) + "\" y=\"" + num(y) + "\"";
  if (a == anchor::middle) out += " text-anchor=\"middle\"";
  if (a == anchor::end) out += " text-anchor=\"end\"";
  if (px != tick_px) out += " font-size=\"" + fixed(px, 1) + "\"";
  if (bold) out += " font-weight=\"bold\"";
  if (rotate) out += " transform=\"rotate(-90 " + num(x) + " " + num(y) + ")\"";
  out += ">" + escape(s) + "</text>\n";
}

inline void line(std::string& out, double x1, double y1, double x2, double y2, std::string_view stroke,
                 double width = 1) {
  out += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" stroke=\"" +
         std::string(stroke) + "\"";
  if (width != 1) out += " stroke-width=\"" + num(width) + "\"";
  out += "/>\n";
}

inline void rect(std::string& out, double x, double y, double w, double h, std::string_view fill,
                 std::string_view extra = {}) {
  out += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) + "\" fill=\"" +
         std::string(fill) + "\"";
  if (!extra.empty()) out += " " + std::string(extra);
  out += "/>\n";
}

// ---------------------------------------------------------------------------------------
// Axes and ticks.

/// The smallest of 1, 2, 5 x 10^k that is >= raw (raw > 0).
inline double nice_step(double raw) {
  const double e = std::floor(std::log10(raw));
  const double base = std::pow(10.0, e);
  const double f = raw / base;
  const double m = f <= 1.0 + 1e-9 ? 1 : f <= 2.0 + 1e-9 ? 2 : f <= 5.0 + 1e-9 ? 5 : 10;
  return m * base;
}

/// The next step of the 1, 2, 5 sequence after `step`.
inline double next_step(double step) { return nice_step(step * 1.5); }

/// Decimals a tick label needs at this step.
inline int step_decimals(double step) { return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9))); }

struct axis {
  axis_scale scale = axis_scale::linear;
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;

  /// Position of `v` between p0 (at lo) and p1 (at hi).
  [[nodiscard]] double map(double v, double p0, double p1) const {
    const double t = scale == axis_scale::linear ? (v - lo) / (hi - lo)
                                                 : (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
    return p0 + t * (p1 - p0);
  }

  [[nodiscard]] double widest_label(double px) const {
    double w = 0;
    for (const auto& l : labels) w = std::max(w, text_width(l, px));
    return w;
  }
};

inline std::string linear_label(double v, double step, double magnitude) {
  if (magnitude >= 1e6 || step_decimals(step) > 6) return general(v, 4);
  return fixed(v, step_decimals(step));
}

/// A linear axis over [lo, hi] with at most `max_ticks` ticks at a 1-2-5 step; `widen`
/// moves lo and hi out to ticks.
inline axis linear_axis(double lo, double hi, std::size_t max_ticks, bool widen) {
  if (hi <= lo) {  // one value: a range around it (from 0 up when it is 0)
    if (lo == 0) {
      hi = 1;
    } else {
      const double pad = std::fabs(lo) * 0.5;
      lo -= pad;
      hi += pad;
    }
  }
  max_ticks = std::max<std::size_t>(max_ticks, 2);
  double step = nice_step((hi - lo) / static_cast<double>(max_ticks));
  axis a;
  a.scale = axis_scale::linear;
  for (int guard = 0; guard < 64; ++guard) {
    double l = lo;
    double h = hi;
    if (widen) {
      l = std::floor(lo / step + 1e-9) * step;
      h = std::ceil(hi / step - 1e-9) * step;
    }
    const double k0 = std::ceil(l / step - 1e-9);
    const double k1 = std::floor(h / step + 1e-9);
    if (k1 - k0 + 1 <= static_cast<double>(max_ticks)) {
      a.lo = l;
      a.hi = h;
      const double magnitude = std::max(std::fabs(l), std::fabs(h));
      for (double k = k0; k <= k1; k += 1) {
        const double v = k * step;
        a.ticks.push_back(v);
        a.labels.push_back(linear_label(v, step, magnitude));
      }
      return a;
    }
    step = next_step(step);
  }
  a.lo = lo;
  a.hi = hi;
  return a;
}

inline std::string log_label(double v) {
  if (v >= 1 && v < 1e6 && std::floor(v) == v) return fixed(v, 0);
  return general(v, 4);
}

/// A log axis over [lo, hi] (lo > 0), ticks at whole powers of the base, every m-th so
/// that at most `max_ticks` show; with no power inside, the two ends.
inline axis log_axis(axis_scale scale, double lo, double hi, std::size_t max_ticks) {
  const double base = scale == axis_scale::log2 ? 2.0 : 10.0;
  if (hi <= lo) {
    lo /= base;
    hi *= base;
  }
  axis a;
  a.scale = scale;
  a.lo = lo;
  a.hi = hi;
  const auto lg = [base](double v) { return base == 2.0 ? std::log2(v) : std::log10(v); };
  const double k0 = std::ceil(lg(lo) - 1e-9);
  const double k1 = std::floor(lg(hi) + 1e-9);
  if (k1 < k0) {
    a.ticks = {lo, hi};
    a.labels = {general(lo, 3), general(hi, 3)};
    return a;
  }
  max_ticks = std::max<std::size_t>(max_ticks, 2);
  double every = 1;
  while ((k1 - k0) / every + 1 > static_cast<double>(max_ticks)) every += 1;
  for (double k = k0; k <= k1; k += every) {
    const double v = std::pow(base, k);
    a.ticks.push_back(v);
    a.labels.push_back(log_label(v));
  }
  return a;
}

/// An x axis whose tick labels fit side by side in `plot_w` px.
inline axis fitted_x_axis(axis_scale scale, double lo, double hi, double plot_w) {
  auto max_ticks = static_cast<std::size_t>(std::max(2.0, std::floor(plot_w / 50.0)));
  for (;;) {
    axis a = scale == axis_scale::linear ? linear_axis(lo, hi, max_ticks, false) : log_axis(scale, lo, hi, max_ticks);
    const double need = static_cast<double>(a.labels.size()) * (a.widest_label(tick_px) + 10.0);
    if (need <= plot_w || max_ticks <= 2) return a;
    --max_ticks;
  }
}

// ---------------------------------------------------------------------------------------
// Line charts.

inline void check_range(std::string_view fn, const std::string& where, const value_range& r, bool log) {
  if (!std::isfinite(r.lo) || !std::isfinite(r.hi) || !(r.lo < r.hi)) {
    fail(fn, where + " range [" + general(r.lo) + ", " + general(r.hi) + "] must be finite with lo < hi");
  }
  if (log && r.lo <= 0)
    fail(fn, where + " range [" + general(r.lo) + ", " + general(r.hi) + "] must be > 0 on a log axis");
}

inline void check_size(std::string_view fn, std::string_view what, double v, double min) {
  if (!std::isfinite(v) || v < min) fail(fn, std::string(what) + " must be >= " + general(min) + ", got " + general(v));
}

inline void validate_line_spec(std::string_view fn, const std::string& prefix, const line_chart_spec& spec) {
  if (spec.lines.empty()) fail(fn, prefix + "no series to draw");
  const bool log = spec.x_scale != axis_scale::linear;
  if (spec.x_range) check_range(fn, prefix + "x", *spec.x_range, log);
  if (spec.y_range) check_range(fn, prefix + "y", *spec.y_range, false);
  for (const auto& s : spec.lines) {
    const std::string who = prefix + "series " + in_quotes(s.name);
    if (s.x.size() != s.y.size()) {
      fail(fn,
           who + " has " + std::to_string(s.x.size()) + " x values but " + std::to_string(s.y.size()) + " y values");
    }
    if (s.x.empty()) fail(fn, who + " is empty");
    if (!s.colour.empty() && !is_hex_colour(s.colour))
      fail(fn, who + " has colour " + in_quotes(s.colour) + ", not #rrggbb");
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i])) fail(fn, who + " has x[" + std::to_string(i) + "] = " + general(s.x[i]));
      if (log && s.x[i] <= 0) {
        fail(fn, who + " has x[" + std::to_string(i) + "] = " + general(s.x[i]) + ", not > 0 on a log axis");
      }
      if (std::isinf(s.y[i])) fail(fn, who + " has y[" + std::to_string(i) + "] = " + general(s.y[i]));
    }
  }
}

inline std::string x_label_text(const line_chart_spec& spec) {
  if (spec.x_label.empty()) return {};
  if (spec.x_scale == axis_scale::log2) return spec.x_label + " (log2 scale)";
  if (spec.x_scale == axis_scale::log10) return spec.x_label + " (log scale)";
  return spec.x_label;
}

/// The least document width that shows a line panel's plot, legend, title and x label.
inline double min_line_width(const line_chart_spec& spec, double left, double legend, bool title_is_subtitle) {
  return std::max({left + 160 + legend, text_width(spec.title, title_is_subtitle ? label_px : title_px) + 24,
                   text_width(x_label_text(spec), label_px) + 12});
}

struct line_layout {
  axis y;
  double left = 0;    ///< from the panel's left edge to the plot area
  double legend = 0;  ///< width of the legend column right of the plot area
  double top = 0;
  double bottom = 0;
  double height = 0;  ///< of the whole panel
};

inline constexpr double legend_row = 18;

/// Everything about a panel's layout but the x axis, which needs the plot's width.
inline line_layout plan_line_panel(const line_chart_spec& spec, double height, bool title_is_subtitle) {
  line_layout l;
  l.top = spec.title.empty() ? 14 : (title_is_subtitle ? 30 : 38);
  l.bottom = spec.x_label.empty() ? 26 : 44;
  double legend_text = 0;
  for (const auto& s : spec.lines) legend_text = std::max(legend_text, text_width(s.name, tick_px));
  l.legend = 16 + 28 + legend_text + 12;
  const double legend_h = static_cast<double>(spec.lines.size()) * legend_row + 8;
  const double min_plot_h = std::max({legend_h, 80.0, text_width(spec.y_label, label_px) + 8});
  l.height = std::max(height, l.top + min_plot_h + l.bottom);
  const double plot_h = l.height - l.top - l.bottom;
  const auto max_ticks = static_cast<std::size_t>(std::clamp(std::floor(plot_h / 30.0), 2.0, 10.0));
  if (spec.y_range) {
    l.y = linear_axis(spec.y_range->lo, spec.y_range->hi, max_ticks, false);
  } else {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -lo;
    for (const auto& s : spec.lines) {
      for (const double v : s.y) {
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
    }
    if (!(lo <= hi)) {  // only gaps: an empty plot
      lo = 0;
      hi = 1;
    }
    if (spec.y_include_zero) {
      lo = std::min(lo, 0.0);
      hi = std::max(hi, 0.0);
    }
    l.y = linear_axis(lo, hi, max_ticks, true);
  }
  l.left = (spec.y_label.empty() ? 10 : 30) + l.y.widest_label(tick_px) + 8;
  return l;
}

inline void draw_line_panel(std::string& out, const line_chart_spec& spec, const line_layout& l, double ox, double oy,
                            double width, std::size_t id, bool title_is_subtitle) {
  const double px0 = ox + l.left;
  const double px1 = ox + width - l.legend;
  const double py0 = oy + l.top;
  const double py1 = oy + l.height - l.bottom;

  double xlo = std::numeric_limits<double>::infinity();
  double xhi = -xlo;
  if (spec.x_range) {
    xlo = spec.x_range->lo;
    xhi = spec.x_range->hi;
  } else {
    for (const auto& s : spec.lines) {
      for (const double v : s.x) {
        xlo = std::min(xlo, v);
        xhi = std::max(xhi, v);
      }
    }
  }
  const axis x = fitted_x_axis(spec.x_scale, xlo, xhi, px1 - px0);
  const std::string clip = "clip-" + std::to_string(id);

  out += "<g class=\"panel\">\n";
  out += "<defs><clipPath id=\"" + clip + "\"><rect x=\"" + num(px0) + "\" y=\"" + num(py0 - 1) + "\" width=\"" +
         num(px1 - px0) + "\" height=\"" + num(py1 - py0 + 2) + "\"/></clipPath></defs>\n";
  if (!spec.title.empty()) {
    if (title_is_subtitle) {
      text(out, (px0 + px1) / 2, oy + 18, spec.title, anchor::middle, label_px, true, false, "subtitle");
    } else {
      text(out, ox + width / 2, oy + 22, spec.title, anchor::middle, title_px, true, false, "title");
    }
  }
  // Grid, axes, ticks.
  for (const double t : l.y.ticks) {
    const double py = l.y.map(t, py1, py0);
    line(out, px0, py, px1, py, "#e6e6e6");
  }
  for (const double t : x.ticks) {
    const double px = x.map(t, px0, px1);
    line(out, px, py0, px, py1, "#e6e6e6");
  }
  line(out, px0, py1, px1, py1, "#333333");
  line(out, px0, py0, px0, py1, "#333333");
  for (std::size_t i = 0; i < l.y.ticks.size(); ++i) {
    const double py = l.y.map(l.y.ticks[i], py1, py0);
    line(out, px0 - 4, py, px0, py, "#333333");
    text(out, px0 - 6, py + 4, l.y.labels[i], anchor::end);
  }
  for (std::size_t i = 0; i < x.ticks.size(); ++i) {
    const double px = x.map(x.ticks[i], px0, px1);
    line(out, px, py1, px, py1 + 4, "#333333");
    text(out, px, py1 + 16, x.labels[i], anchor::middle);
  }
  if (!spec.x_label.empty()) {
    const std::string xl = x_label_text(spec);
    const double cx = centre_within((px0 + px1) / 2, text_width(xl, label_px), ox + 4, ox + width - 4);
    text(out, cx, py1 + 36, xl, anchor::middle, label_px, false, false, "axis-label");
  }
  if (!spec.y_label.empty()) {
    text(out, ox + 16, (py0 + py1) / 2, spec.y_label, anchor::middle, label_px, false, true, "axis-label");
  }

  // Series.
  for (std::size_t si = 0; si < spec.lines.size(); ++si) {
    const auto& s = spec.lines[si];
    const std::string colour = s.colour.empty() ? palette(si) : s.colour;
    std::string d;
    bool pen_down = false;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (std::isnan(s.y[i])) {
        pen_down = false;
        continue;
      }
      d += pen_down ? "L" : (d.empty() ? "M" : " M");
      d += num(x.map(s.x[i], px0, px1)) + " " + num(l.y.map(s.y[i], py1, py0));
      pen_down = true;
    }
    out += "<g class=\"series\" clip-path=\"url(#" + clip + ")\">\n";
    if (!d.empty()) {
      out += "<path class=\"line\" d=\"" + d + "\" fill=\"none\" stroke=\"" + colour +
             "\" stroke-width=\"1.8\" stroke-linejoin=\"round\"";
      if (s.style == line_style::dashed) out += " stroke-dasharray=\"6 3\"";
      out += "/>\n";
    }
    if (s.markers) {
      for (std::size_t i = 0; i < s.x.size(); ++i) {
        if (std::isnan(s.y[i])) continue;
        out += "<circle cx=\"" + num(x.map(s.x[i], px0, px1)) + "\" cy=\"" + num(l.y.map(s.y[i], py1, py0)) +
               "\" r=\"2.5\" fill=\"" + colour + "\"/>\n";
      }
    }
    out += "</g>\n";
  }

  // Legend, right of the plot area.
  const double lx = px1 + 16;
  for (std::size_t si = 0; si < spec.lines.size(); ++si) {
    const auto& s = spec.lines[si];
    const std::string colour = s.colour.empty() ? palette(si) : s.colour;
    const double ly = py0 + 8 + static_cast<double>(si) * legend_row;
    out += "<g class=\"legend-entry\">\n";
    out += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(lx + 22) + "\" y2=\"" + num(ly) +
           "\" stroke=\"" + colour + "\" stroke-width=\"1.8\"";
    if (s.style == line_style::dashed) out += " stroke-dasharray=\"6 3\"";
    out += "/>\n";
    if (s.markers)
      out += "<circle cx=\"" + num(lx + 11) + "\" cy=\"" + num(ly) + "\" r=\"2.5\" fill=\"" + colour + "\"/>\n";
    text(out, lx + 28, ly + 4, s.name, anchor::start);
    out += "</g>\n";
  }
  out += "</g>\n";
}

// ---------------------------------------------------------------------------------------
// Bars.

inline std::string letter(std::size_t i) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('a' + static_cast<int>(i % 26)));
    i /= 26;
  } while (i-- > 0);
  return s;
}

/// <pattern> for the hatching of bar `b` (b >= 1; bar 0 is plain), cycling six kinds.
inline std::string hatch_pattern(std::size_t b) {
  const std::size_t kind = (b - 1) % 6;
  const std::string id = "hatch-" + std::to_string(b);
  const std::string stroke = " stroke=\"#000000\" stroke-opacity=\"0.55\" stroke-width=\"1.2\"";
  std::string p = "<pattern id=\"" + id + "\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\"";
  constexpr std::array<int, 6> angle = {45, -45, 0, 90, 0, 45};
  if (angle[kind] != 0) p += " patternTransform=\"rotate(" + std::to_string(angle[kind]) + ")\"";
  p += ">";
  if (kind == 4) {
    p += "<circle cx=\"3\" cy=\"3\" r=\"1.2\" fill=\"#000000\" fill-opacity=\"0.6\"/>";
  } else if (kind == 5) {
    p += "<path d=\"M0 3H6M3 0V6\" fill=\"none\"" + stroke + "/>";
  } else {
    p += "<path d=\"M3 0V6\" fill=\"none\"" + stroke + "/>";
  }
  return p + "</pattern>\n";
}

struct bars_input {
  const std::string* title = nullptr;
  const std::string* x_label = nullptr;
  const std::string* y_label = nullptr;
  const std::vector<std::string>* categories = nullptr;
  const std::vector<std::string>* bars = nullptr;
  const std::vector<std::string>* segments = nullptr;  ///< null: single values, colour by bar
  std::vector<std::vector<std::vector<double>>> values;
  std::optional<double> y_max;
  double width = 0;
  double height = 400;
};

inline std::string draw_bars(const bars_input& in) {
  const auto& cats = *in.categories;
  const auto& bars = *in.bars;
  const bool stacked = in.segments != nullptr;
  const std::size_t nseg = stacked ? in.segments->size() : 1;
  const std::size_t nbar = bars.size();
  const std::size_t ncat = cats.size();

  double top_value = 0;
  for (const auto& c : in.values) {
    for (const auto& b : c) {
      double sum = 0;
      for (const double v : b) sum += v;
      top_value = std::max(top_value, sum);
    }
  }

  // Layout: legend right, letters and category labels under the plot.
  const bool hatched = stacked && nbar > 1;
  double legend_text = 0;
  if (stacked) {
    for (const auto& s : *in.segments) legend_text = std::max(legend_text, text_width(s, tick_px));
  }
  if (!stacked || hatched) {
    for (std::size_t b = 0; b < nbar; ++b) {
      const std::string name = hatched ? letter(b) + ": " + bars[b] : bars[b];
      legend_text = std::max(legend_text, text_width(name, tick_px));
    }
  }
  const double legend_w = 16 + 22 + legend_text + 12;
  const double top = in.title->empty() ? 14 : 38;
  const double plot_h_guess = in.height - top - 60;
  const auto max_ticks = static_cast<std::size_t>(std::clamp(std::floor(plot_h_guess / 30.0), 2.0, 10.0));
  const axis y = in.y_max ? linear_axis(0, *in.y_max, max_ticks, false) : linear_axis(0, top_value, max_ticks, true);
  const double left = (in.y_label->empty() ? 10 : 30) + y.widest_label(tick_px) + 8;
  double width = in.width;
  if (width <= 0) {
    const double per_group = static_cast<double>(nbar) * 11.0 + 8.0;
    width = left + std::clamp(static_cast<double>(ncat) * per_group, 240.0, 1800.0) + legend_w;
  }
  width = std::max({width, text_width(*in.title, title_px) + 24, text_width(*in.x_label, label_px) + 12});
  const double px0 = left;
  const double px1 = width - legend_w;
  const double gw = (px1 - px0) / static_cast<double>(ncat);
  const double bw = gw * 0.8 / static_cast<double>(nbar);
  const bool letters = hatched && bw >= 8;
  const double cat_label_y = letters ? 30 : 16;
  const double bottom = cat_label_y + (in.x_label->empty() ? 8 : 26);
  const double legend_rows = static_cast<double>((stacked ? nseg : 0) + (!stacked || hatched ? nbar : 0));
  const double min_plot_h = std::max({legend_rows * legend_row + 16, 100.0, text_width(*in.y_label, label_px) + 8});
  const double height = std::max(in.height, top + min_plot_h + bottom);
  const double py0 = top;
  const double py1 = height - bottom;

  std::string out;
  open_document(out, width, height, in.title->empty() ? "bar chart" : *in.title);
  out += "<defs><clipPath id=\"clip-0\"><rect x=\"" + num(px0) + "\" y=\"" + num(py0) + "\" width=\"" + num(px1 - px0) +
         "\" height=\"" + num(py1 - py0) + "\"/></clipPath>\n";
  if (hatched) {
    for (std::size_t b = 1; b < nbar; ++b) out += hatch_pattern(b);
  }
  out += "</defs>\n";
  if (!in.title->empty()) text(out, width / 2, 22, *in.title, anchor::middle, title_px, true, false, "title");

  for (std::size_t i = 0; i < y.ticks.size(); ++i) {
    const double py = y.map(y.ticks[i], py1, py0);
    line(out, px0, py, px1, py, "#e6e6e6");
    line(out, px0 - 4, py, px0, py, "#333333");
    text(out, px0 - 6, py + 4, y.labels[i], anchor::end);
  }

  // Bars.
  out += "<g class=\"bars\" clip-path=\"url(#clip-0)\">\n";
  for (std::size_t c = 0; c < ncat; ++c) {
    const double gx = px0 + static_cast<double>(c) * gw + gw * 0.1;
    for (std::size_t b = 0; b < nbar; ++b) {
      const double bx = gx + static_cast<double>(b) * bw;
      out += "<g class=\"bar\">\n";
      double acc = 0;
      for (std::size_t s = 0; s < nseg; ++s) {
        const double v = in.values[c][b][s];
        if (v <= 0) continue;
        const double ya = y.map(acc, py1, py0);
        acc += v;
        const double yb = y.map(acc, py1, py0);
        rect(out, bx, yb, bw, ya - yb, stacked ? palette(s) : palette(b), "class=\"seg\"");
      }
      if (hatched && b > 0 && acc > 0) {
        const double yb = y.map(acc, py1, py0);
        rect(out, bx, yb, bw, py1 - yb, "url(#hatch-" + std::to_string(b) + ")", "class=\"hatch\"");
      }
      out += "</g>\n";
    }
  }
  out += "</g>\n";

  line(out, px0, py1, px1, py1, "#333333");
  line(out, px0, py0, px0, py1, "#333333");

  // Letters under the bars, category labels under the groups (every k-th when crowded).
  if (letters) {
    for (std::size_t c = 0; c < ncat; ++c) {
      const double gx = px0 + static_cast<double>(c) * gw + gw * 0.1;
      for (std::size_t b = 0; b < nbar; ++b) {
        text(out, gx + (static_cast<double>(b) + 0.5) * bw, py1 + 13, letter(b), anchor::middle, tick_px, false, false,
             "bar-letter");
      }
    }
  }
  double widest = 0;
  for (const auto& c : cats) widest = std::max(widest, text_width(c, tick_px));
  const auto every = static_cast<std::size_t>(std::max(1.0, std::ceil((widest + 6) / gw)));
  for (std::size_t c = 0; c < ncat; c += every) {
    const double cx = px0 + (static_cast<double>(c) + 0.5) * gw;
    line(out, cx, py1, cx, py1 + 3, "#333333");
    text(out, cx, py1 + cat_label_y, cats[c], anchor::middle, tick_px, false, false, "category");
  }
  if (!in.x_label->empty()) {
    const double cx = centre_within((px0 + px1) / 2, text_width(*in.x_label, label_px), 4, width - 4);
    text(out, cx, py1 + cat_label_y + 20, *in.x_label, anchor::middle, label_px, false, false, "axis-label");
  }
  if (!in.y_label->empty()) {
    text(out, 16, (py0 + py1) / 2, *in.y_label, anchor::middle, label_px, false, true, "axis-label");
  }

  // Legend: segment colours, then the bars (hatching and letter, or colour).
  const double lx = px1 + 16;
  double ly = py0 + 4;
  const auto entry = [&](std::string_view fill, const std::string& hatch, const std::string& name) {
    out += "<g class=\"legend-entry\">\n";
    rect(out, lx, ly, 16, 12, fill, "stroke=\"#666666\" stroke-width=\"0.5\"");
    if (!hatch.empty()) rect(out, lx, ly, 16, 12, hatch);
    text(out, lx + 22, ly + 10, name, anchor::start);
    out += "</g>\n";
    ly += legend_row;
  };
  if (stacked) {
    for (std::size_t s = 0; s < nseg; ++s) entry(palette(s), {}, (*in.segments)[s]);
  }
  if (hatched) ly += 6;
  if (!stacked || hatched) {
    for (std::size_t b = 0; b < nbar; ++b) {
      if (hatched) {
        entry("#d9d9d9", b == 0 ? std::string{} : "url(#hatch-" + std::to_string(b) + ")", letter(b) + ": " + bars[b]);
      } else {
        entry(palette(b), {}, bars[b]);
      }
    }
  }
  close_document(out);
  return out;
}

inline void validate_bar_names(std::string_view fn, const std::vector<std::string>& categories,
                               const std::vector<std::string>& bars, std::size_t value_rows, double width,
                               double height) {
  if (categories.empty()) fail(fn, "no categories");
  if (bars.empty()) fail(fn, "no bars");
  if (value_rows != categories.size()) {
    fail(fn, "values has " + std::to_string(value_rows) + " categories but categories has " +
                 std::to_string(categories.size()) + " names");
  }
  if (width != 0) check_size(fn, "width", width, 200);
  check_size(fn, "height", height, 160);
}

inline void check_bar_value(std::string_view fn, const std::vector<std::string>& categories,
                            const std::vector<std::string>& bars, std::size_t c, std::size_t b,
                            const std::string& segment, double v) {
  if (!std::isfinite(v) || v < 0) {
    fail(fn, "category " + in_quotes(categories[c]) + ", bar " + in_quotes(bars[b]) + segment + " has value " +
                 general(v) + ", not finite and >= 0");
  }
}

inline void check_y_max(std::string_view fn, const std::optional<double>& y_max) {
  if (y_max && !(std::isfinite(*y_max) && *y_max > 0)) fail(fn, "y_max must be finite and > 0, got " + general(*y_max));
}

}  // namespace detail

// -----------------------------------------------------------------------------------------
// The charts.

/// A line chart: one line per series, legend right of the plot.
[[nodiscard]] inline std::string line_chart(const line_chart_spec& spec) {
  constexpr std::string_view fn = "line_chart";
  detail::validate_line_spec(fn, "", spec);
  detail::check_size(fn, "width", spec.width, 240);
  detail::check_size(fn, "height", spec.height, 160);
  const detail::line_layout l = detail::plan_line_panel(spec, spec.height, false);
  const double width = std::max(spec.width, detail::min_line_width(spec, l.left, l.legend, false));
  std::string out;
  detail::open_document(out, width, l.height, spec.title.empty() ? "line chart" : spec.title);
  detail::draw_line_panel(out, spec, l, 0, 0, width, 0, false);
  detail::close_document(out);
  return out;
}

/// Line charts stacked top to bottom under one title, their plot areas aligned.
[[nodiscard]] inline std::string line_panels(const line_panels_spec& spec) {
  constexpr std::string_view fn = "line_panels";
  if (spec.panels.empty()) detail::fail(fn, "no panels");
  detail::check_size(fn, "width", spec.width, 240);
  std::vector<detail::line_layout> layouts;
  double left = 0;
  double legend = 0;
  for (std::size_t i = 0; i < spec.panels.size(); ++i) {
    const auto& p = spec.panels[i];
    detail::validate_line_spec(fn, "panel " + std::to_string(i) + ": ", p);
    detail::check_size(fn, "panel " + std::to_string(i) + ": height", p.height, 120);
    layouts.push_back(detail::plan_line_panel(p, p.height, true));
    left = std::max(left, layouts.back().left);
    legend = std::max(legend, layouts.back().legend);
  }
  double width = std::max(spec.width, detail::text_width(spec.title, detail::title_px) + 24);
  for (const auto& p : spec.panels) width = std::max(width, detail::min_line_width(p, left, legend, true));
  const double top = spec.title.empty() ? 6 : 34;
  double height = top;
  for (auto& l : layouts) {
    l.left = left;
    l.legend = legend;
    height += l.height;
  }
  std::string out;
  detail::open_document(out, width, height + 6, spec.title.empty() ? "line charts" : spec.title);
  if (!spec.title.empty()) {
    detail::text(out, width / 2, 22, spec.title, detail::anchor::middle, detail::title_px, true, false, "title");
  }
  double oy = top;
  for (std::size_t i = 0; i < spec.panels.size(); ++i) {
    detail::draw_line_panel(out, spec.panels[i], layouts[i], 0, oy, width, i, true);
    oy += layouts[i].height;
  }
  detail::close_document(out);
  return out;
}

/// Small multiples of matrices under one sequential colour scale from 0 (white) to the
/// maximum (dark blue), with a colour bar. Zero cells show the panel's white background.
[[nodiscard]] inline std::string heatmap_grid(const heatmap_grid_spec& spec) {
  constexpr std::string_view fn = "heatmap_grid";
  using detail::fail;
  using detail::num;
  if (spec.panels.empty()) fail(fn, "no panels");
  detail::check_size(fn, "panel_width", spec.panel_width, 8);
  detail::check_size(fn, "panel_height", spec.panel_height, 8);
  if (spec.max_value && !(std::isfinite(*spec.max_value) && *spec.max_value > 0)) {
    fail(fn, "max_value must be finite and > 0, got " + detail::general(*spec.max_value));
  }
  std::size_t cells = 0;
  double top_value = 0;
  for (std::size_t p = 0; p < spec.panels.size(); ++p) {
    const auto& panel = spec.panels[p];
    const std::string who = "panel " + detail::in_quotes(panel.title);
    if (panel.values.empty()) fail(fn, who + " has no rows");
    const std::size_t ncol = panel.values[0].size();
    if (ncol == 0) fail(fn, who + " has no columns");
    for (std::size_t r = 0; r < panel.values.size(); ++r) {
      const auto& row = panel.values[r];
      if (row.size() != ncol) {
        fail(fn, who + " row " + std::to_string(r) + " has " + std::to_string(row.size()) + " values but row 0 has " +
                     std::to_string(ncol));
      }
      for (std::size_t c = 0; c < ncol; ++c) {
        if (!std::isfinite(row[c]) || row[c] < 0) {
          fail(fn, who + " has value " + detail::general(row[c]) + " at row " + std::to_string(r) + ", column " +
                       std::to_string(c) + ", not finite and >= 0");
        }
        top_value = std::max(top_value, row[c]);
      }
    }
    cells += panel.values.size() * ncol;
    if (cells > max_heatmap_cells) {
      fail(fn, "more than " + std::to_string(max_heatmap_cells) + " cells in all, at panel " +
                   detail::in_quotes(panel.title));
    }
  }
  const double vmax = spec.max_value ? *spec.max_value : (top_value > 0 ? top_value : 1.0);

  const std::size_t n = spec.panels.size();
  std::size_t cols = spec.columns;
  if (cols == 0) {
    cols = std::min<std::size_t>(8, static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(n)))));
  }
  cols = std::min(cols, n);
  const std::size_t grid_rows = (n + cols - 1) / cols;

  const double pw = spec.panel_width;
  const double ph = spec.panel_height;
  const double gap_x = 14;
  const double panel_title_h = 16;
  const double extent_h = 14;  // room under each panel for the column extents
  const double cell_h = panel_title_h + ph + extent_h + 6;
  const double top = spec.title.empty() ? 10 : 36;
  const double left = (spec.y_label.empty() ? 8 : 26) + 22;
  const double grid_w = static_cast<double>(cols) * (pw + gap_x) - gap_x;
  const double grid_h = static_cast<double>(grid_rows) * cell_h;
  const std::string max_label = detail::general(vmax, 4);
  const double bar_x = left + grid_w + 24;
  const double bar_w = 14;
  const double bar_label_w = std::max(detail::text_width(max_label, detail::tick_px), 8.0);
  const double width = std::max({bar_x + bar_w + 6 + bar_label_w + (spec.value_label.empty() ? 10 : 28),
                                 detail::text_width(spec.title, detail::title_px) + 24,
                                 detail::text_width(spec.x_label, detail::label_px) + 12});
  const double grid_span = std::max({grid_h, 140.0, detail::text_width(spec.y_label, detail::label_px) + 8});
  const double height = top + grid_span + (spec.x_label.empty() ? 8 : 26);

  std::string out;
  detail::open_document(out, width, height, spec.title.empty() ? "heatmap" : spec.title);
  // The colour bar's gradient: 0 at the bottom.
  out += "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int i = 0; i <= 10; ++i) {
    const double t = i / 10.0;
    out += "<stop offset=\"" + detail::fixed(t, 1) + "\" stop-color=\"" + detail::hex(detail::sequential(t)) + "\"/>";
  }
  out += "</linearGradient></defs>\n";
  if (!spec.title.empty()) {
    detail::text(out, width / 2, 22, spec.title, detail::anchor::middle, detail::title_px, true, false, "title");
  }

  for (std::size_t p = 0; p < n; ++p) {
    const auto& panel = spec.panels[p];
    const std::size_t gr = p / cols;
    const std::size_t gc = p % cols;
    const double x0 = left + static_cast<double>(gc) * (pw + gap_x);
    const double y0 = top + static_cast<double>(gr) * cell_h + panel_title_h;
    const std::size_t nr = panel.values.size();
    const std::size_t nc = panel.values[0].size();
    out += "<g class=\"panel\">\n";
    detail::text(out, x0 + pw / 2, y0 - 4, panel.title, detail::anchor::middle, detail::tick_px, false, false,
                 "panel-title");
    detail::rect(out, x0, y0, pw, ph, "#ffffff");
    out += "<g class=\"cells\" transform=\"translate(" + num(x0) + " " + num(y0) + ") scale(" +
           detail::general(pw / static_cast<double>(nc), 6) + " " + detail::general(ph / static_cast<double>(nr), 6) +
           ")\" shape-rendering=\"crispEdges\">\n";
    // Runs of equal colour in a row share one <rect>; rects of one colour share a <g>.
    std::map<std::string, std::string> by_colour;
    for (std::size_t r = 0; r < nr; ++r) {
      const auto& row = panel.values[r];
      std::size_t c = 0;
      while (c < nc) {
        if (row[c] <= 0) {
          ++c;
          continue;
        }
        const std::string colour = detail::hex(detail::sequential(std::min(row[c], vmax) / vmax));
        std::size_t run = 1;
        while (c + run < nc && row[c + run] > 0 &&
               detail::hex(detail::sequential(std::min(row[c + run], vmax) / vmax)) == colour) {
          ++run;
        }
        by_colour[colour] += "<rect x=\"" + std::to_string(c) + "\" y=\"" + std::to_string(r) + "\" width=\"" +
                             std::to_string(run) + "\" height=\"1\"/>\n";
        c += run;
      }
    }
    for (const auto& [colour, rects] : by_colour) out += "<g fill=\"" + colour + "\">\n" + rects + "</g>\n";
    out += "</g>\n";
    detail::rect(out, x0, y0, pw, ph, "none", "stroke=\"#b3b3b3\" stroke-width=\"0.8\"");
    // Extents: rows on the leftmost panels, columns under every panel of the bottom row.
    if (gc == 0) {
      detail::text(out, x0 - 3, y0 + 9, "0", detail::anchor::end);
      detail::text(out, x0 - 3, y0 + ph, std::to_string(nr - 1), detail::anchor::end);
    }
    if (p + cols >= n) {
      detail::text(out, x0, y0 + ph + 11, "0", detail::anchor::start);
      detail::text(out, x0 + pw, y0 + ph + 11, std::to_string(nc - 1), detail::anchor::end);
    }
    out += "</g>\n";
  }

  // Colour bar.
  const double bar_y0 = top + panel_title_h;
  const double bar_h = std::clamp(grid_h - panel_title_h - extent_h - 6, 80.0, 240.0);
  out += "<g class=\"colour-bar\">\n";
  detail::rect(out, bar_x, bar_y0, bar_w, bar_h, "url(#scale)", "stroke=\"#b3b3b3\" stroke-width=\"0.8\"");
  detail::text(out, bar_x + bar_w + 5, bar_y0 + 9, max_label, detail::anchor::start);
  detail::text(out, bar_x + bar_w + 5, bar_y0 + bar_h, "0", detail::anchor::start);
  if (!spec.value_label.empty()) {
    detail::text(out, bar_x + bar_w + 6 + bar_label_w + 14, bar_y0 + bar_h / 2, spec.value_label,
                 detail::anchor::middle, detail::label_px, false, true, "axis-label");
  }
  out += "</g>\n";
  if (!spec.x_label.empty()) {
    const double cx =
        detail::centre_within(left + grid_w / 2, detail::text_width(spec.x_label, detail::label_px), 4, width - 4);
    detail::text(out, cx, top + grid_h + 16, spec.x_label, detail::anchor::middle, detail::label_px, false, false,
                 "axis-label");
  }
  if (!spec.y_label.empty()) {
    detail::text(out, 16, top + grid_span / 2, spec.y_label, detail::anchor::middle, detail::label_px, false, true,
                 "axis-label");
  }
  detail::close_document(out);
  return out;
}

/// Grouped stacked bars (see stacked_bars_spec).
[[nodiscard]] inline std::string stacked_bars(const stacked_bars_spec& spec) {
  constexpr std::string_view fn = "stacked_bars";
  detail::validate_bar_names(fn, spec.categories, spec.bars, spec.values.size(), spec.width, spec.height);
  if (spec.segments.empty()) detail::fail(fn, "no segments");
  detail::check_y_max(fn, spec.y_max);
  for (std::size_t c = 0; c < spec.values.size(); ++c) {
    const auto& cat = spec.values[c];
    if (cat.size() != spec.bars.size()) {
      detail::fail(fn, "category " + detail::in_quotes(spec.categories[c]) + " has " + std::to_string(cat.size()) +
                           " bars but bars has " + std::to_string(spec.bars.size()) + " names");
    }
    for (std::size_t b = 0; b < cat.size(); ++b) {
      if (cat[b].size() != spec.segments.size()) {
        detail::fail(fn, "category " + detail::in_quotes(spec.categories[c]) + ", bar " +
                             detail::in_quotes(spec.bars[b]) + " has " + std::to_string(cat[b].size()) +
                             " segments but segments has " + std::to_string(spec.segments.size()) + " names");
      }
      for (std::size_t s = 0; s < cat[b].size(); ++s) {
        detail::check_bar_value(fn, spec.categories, spec.bars, c, b,
                                ", segment " + detail::in_quotes(spec.segments[s]), cat[b][s]);
      }
    }
  }
  detail::bars_input in;
  in.title = &spec.title;
  in.x_label = &spec.x_label;
  in.y_label = &spec.y_label;
  in.categories = &spec.categories;
  in.bars = &spec.bars;
  in.segments = &spec.segments;
  in.values = spec.values;
  in.y_max = spec.y_max;
  in.width = spec.width;
  in.height = spec.height;
  return detail::draw_bars(in);
}

/// Grouped bars of single values, one colour per bar (see grouped_bars_spec).
[[nodiscard]] inline std::string grouped_bars(const grouped_bars_spec& spec) {
  constexpr std::string_view fn = "grouped_bars";
  detail::validate_bar_names(fn, spec.categories, spec.bars, spec.values.size(), spec.width, spec.height);
  detail::check_y_max(fn, spec.y_max);
  detail::bars_input in;
  for (std::size_t c = 0; c < spec.values.size(); ++c) {
    const auto& cat = spec.values[c];
    if (cat.size() != spec.bars.size()) {
      detail::fail(fn, "category " + detail::in_quotes(spec.categories[c]) + " has " + std::to_string(cat.size()) +
                           " bars but bars has " + std::to_string(spec.bars.size()) + " names");
    }
    auto& dst = in.values.emplace_back();
    for (std::size_t b = 0; b < cat.size(); ++b) {
      detail::check_bar_value(fn, spec.categories, spec.bars, c, b, "", cat[b]);
      dst.push_back({cat[b]});
    }
  }
  in.title = &spec.title;
  in.x_label = &spec.x_label;
  in.y_label = &spec.y_label;
  in.categories = &spec.categories;
  in.bars = &spec.bars;
  in.y_max = spec.y_max;
  in.width = spec.width;
  in.height = spec.height;
  return detail::draw_bars(in);
}

}  // namespace moepolicy::examples::svg
