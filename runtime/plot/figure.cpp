#include "plot/figure.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>

#include "core/error.h"

namespace bv::plot {

namespace {

// matplotlib's tab10, a palette people read at a glance.
const double kPalette[10][3] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17},
                                {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29},
                                {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}, {0.74, 0.74, 0.13},
                                {0.09, 0.75, 0.81}};

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// A step of 1, 2 or 5 times a power of ten giving about `n` ticks over [lo, hi].
double tick_step(double lo, double hi, int n) {
  double raw = (hi - lo) / n;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// The first multiple of `step` at or above `lo` (ticks at 0.5, 1.0, not at 0.2, 0.7).
double first_tick(double lo, double step) { return std::ceil(lo / step - 1e-6) * step; }

// The range widened to whole ticks. All values equal (a lone point, a constant): 5% of the
// value on either side, 0.05 around 0, so that the ticks read as the value's own digits.
void nice(Range& r) {
  if (r.empty()) r.lo = 0, r.hi = 1;
  if (r.hi - r.lo <= 1e-12 * std::max(std::fabs(r.lo), std::fabs(r.hi))) {
    double mid = (r.lo + r.hi) / 2;
    double pad = std::max(std::fabs(mid) * 0.05, mid == 0 ? 0.05 : 1e-300);
    r.lo = mid - pad, r.hi = mid + pad;
  }
  // Twice: widening can change the step the ticks are drawn with (tick_step of the new range).
  for (int i = 0; i < 2; ++i) {
    double step = tick_step(r.lo, r.hi, 5);
    r.lo = std::floor(r.lo / step + 1e-9) * step;
    r.hi = std::ceil(r.hi / step - 1e-9) * step;
  }
}

std::string tick_text(double v, double step) {
  char buf[32];
  if (std::fabs(v) < step * 1e-6) v = 0;
  double a = std::fabs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) {
    // As many digits as tell neighbouring ticks apart (1.00e-05, 1.02e-05).
    int digits = static_cast<int>(std::floor(std::log10(a)) - std::floor(std::log10(step)));
    std::snprintf(buf, sizeof buf, "%.*e", std::clamp(digits, 1, 8), v);
  } else {
    int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

void text_at(cairo_t* cr, const std::string& s, double x, double y, double align_x, double align_y,
             double angle = 0) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -e.width * align_x - e.x_bearing, -e.height * align_y - e.y_bearing);
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
}

void set_color(cairo_t* cr, int color) {
  if (color < 0) return cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
  const double* c = kPalette[color % 10];
  cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

// Line styles by Series::dash, in the units of a line 2 wide.
void set_dash(cairo_t* cr, int dash) {
  static const double kDashes[4][4] = {{0}, {6, 4}, {1, 4}, {8, 4, 1, 4}};
  static const int kCounts[4] = {0, 2, 2, 4};
  int d = ((dash % 4) + 4) % 4;
  cairo_set_dash(cr, kDashes[d], kCounts[d], 0);
}

// The line style a series is drawn in: on the right axis, solid becomes dashed.
int drawn_dash(const Series& s, bool right) { return right && s.dash == 0 ? 1 : s.dash; }

size_t finite_points(const Series& s) {
  size_t n = 0;
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
    n += std::isfinite(s.x[i]) && std::isfinite(s.y[i]) ? 1 : 0;
  }
  return n;
}

bool marked(const Series& s) {
  size_t n = finite_points(s);
  return s.marker || (n >= 1 && n <= static_cast<size_t>(kMarkedPoints));
}

void dot(cairo_t* cr, double x, double y) {
  cairo_new_path(cr);
  cairo_arc(cr, x, y, 3.5, 0, 2 * M_PI);
  cairo_fill(cr);
}

// A legend entry: a short line in the series' colour and style (a dot on it when the series'
// points are marked), then its name. Returns the sample's centre.
LegendSample legend_entry(cairo_t* cr, const Series& s, bool right, bool marker, double x,
                          double y) {
  set_color(cr, s.color);
  set_dash(cr, drawn_dash(s, right));
  cairo_set_line_width(cr, 2);
  cairo_move_to(cr, x, y), cairo_line_to(cr, x + 26, y), cairo_stroke(cr);
  cairo_set_dash(cr, nullptr, 0, 0);
  if (marker) dot(cr, x + 13, y);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text_at(cr, s.name, x + 32, y, 0, 0.5);
  return {s.name, x + 13, y, marker};
}

// Whether a panel's legend entry shows the marker: its series' own, or for an entry without
// points (a line style), whether a series of its list in that style is marked.
bool legend_marker(const Series& entry, const std::vector<Series>& list, bool right) {
  if (finite_points(entry) > 0 || entry.marker) return marked(entry);
  for (const Series& s : list) {
    if (&s != &entry && drawn_dash(s, right) == drawn_dash(entry, right) && marked(s)) return true;
  }
  return false;
}

Axis axis(const Range& r, double step) {
  Axis a{r.lo, r.hi, {}};
  for (double v = first_tick(r.lo, step); v <= r.hi + step * 1e-6; v += step) {
    a.ticks.push_back(tick_text(v, step));
  }
  return a;
}

PanelDrawn draw_panel(cairo_t* cr, const Panel& p, double W, double H) {
  const double left = 70, right = p.series_right.empty() ? 20 : 70, top = 34, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  Range xr, yr, yr2;
  for (const Series& s : p.series) {
    for (double v : s.x) xr.add(v);
    for (double v : s.y) yr.add(v);
  }
  for (const Series& s : p.series_right) {
    for (double v : s.x) xr.add(v);
    for (double v : s.y) yr2.add(v);
  }
  bool no_data = xr.empty();
  nice(xr), nice(yr), nice(yr2);
  auto X = [&](double v) { return left + (v - xr.lo) / (xr.hi - xr.lo) * pw; };
  auto Y = [&](double v, const Range& r) { return top + (r.hi - v) / (r.hi - r.lo) * ph; };

  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  // Grid and ticks.
  cairo_set_line_width(cr, 1);
  cairo_set_font_size(cr, 11);
  double xs = tick_step(xr.lo, xr.hi, 5), ys = tick_step(yr.lo, yr.hi, 5);
  PanelDrawn drawn;
  drawn.x = axis(xr, xs), drawn.y = axis(yr, ys);
  for (double v = first_tick(xr.lo, xs); v <= xr.hi + xs * 1e-6; v += xs) {
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, X(v), top), cairo_line_to(cr, X(v), top + ph), cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text_at(cr, tick_text(v, xs), X(v), top + ph + 6, 0.5, 0);
  }
  for (double v = first_tick(yr.lo, ys); v <= yr.hi + ys * 1e-6; v += ys) {
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, left, Y(v, yr)), cairo_line_to(cr, left + pw, Y(v, yr)), cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text_at(cr, tick_text(v, ys), left - 6, Y(v, yr), 1, 0.5);
  }
  if (!p.series_right.empty()) {
    double s2 = tick_step(yr2.lo, yr2.hi, 5);
    drawn.y_right = axis(yr2, s2);
    for (double v = first_tick(yr2.lo, s2); v <= yr2.hi + s2 * 1e-6; v += s2) {
      text_at(cr, tick_text(v, s2), left + pw + 6, Y(v, yr2), 0, 0.5);
    }
  }
  // Frame, labels, title.
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_stroke(cr);
  cairo_set_font_size(cr, 12);
  text_at(cr, p.xlabel, left + pw / 2, H - 8, 0.5, 1);
  text_at(cr, p.ylabel, 16, top + ph / 2, 0.5, 0.5, -M_PI / 2);
  if (!p.ylabel_right.empty())
    text_at(cr, p.ylabel_right, W - 14, top + ph / 2, 0.5, 0.5, M_PI / 2);
  cairo_set_font_size(cr, 14);
  text_at(cr, p.title, left + pw / 2, 10, 0.5, 0);
  if (no_data) {
    cairo_set_font_size(cr, 12);
    text_at(cr, "no data", left + pw / 2, top + ph / 2, 0.5, 0.5);
    return drawn;
  }

  // The lines, clipped to the plot area.
  cairo_save(cr);
  cairo_rectangle(cr, left, top, pw, ph);
  cairo_clip(cr);
  cairo_set_line_width(cr, 2);
  auto draw = [&](const Series& s, const Range& r, bool right) {
    set_color(cr, s.color);
    set_dash(cr, drawn_dash(s, right));
    bool pen = false;
    size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      if (pen) {
        cairo_line_to(cr, X(s.x[i]), Y(s.y[i], r));
      } else {
        cairo_move_to(cr, X(s.x[i]), Y(s.y[i], r));
        pen = true;
      }
    }
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    cairo_stroke(cr);
    if (!marked(s)) return;  // a lone point (an eval run once) is marked: a line of one point
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) dot(cr, X(s.x[i]), Y(s.y[i], r));
    }
  };
  for (const Series& s : p.series) draw(s, yr, false);
  for (const Series& s : p.series_right) draw(s, yr2, true);
  cairo_restore(cr);
  cairo_set_dash(cr, nullptr, 0, 0);

  // The legend, top right inside the plot.
  cairo_set_font_size(cr, 11);
  std::vector<std::pair<const Series*, bool>> entries;
  // Series without a name stay out of the legend (their colour is named by another entry).
  for (const Series& s : p.series) {
    if (!s.name.empty()) entries.emplace_back(&s, false);
  }
  for (const Series& s : p.series_right) {
    if (!s.name.empty()) entries.emplace_back(&s, true);
  }
  if (entries.empty()) return drawn;
  double widest = 0;
  for (auto& [s, dashed] : entries) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s->name.c_str(), &e);
    widest = std::max(widest, e.x_advance);
  }
  double lx = left + pw - widest - 44, ly = top + 8, row = 16;
  cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
  cairo_rectangle(cr, lx - 6, ly - 4, widest + 46, row * static_cast<double>(entries.size()) + 6);
  cairo_fill(cr);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [s, right] = entries[i];
    bool marker = legend_marker(*s, right ? p.series_right : p.series, right);
    drawn.legend.push_back(
        legend_entry(cr, *s, right, marker, lx, ly + row * static_cast<double>(i) + row / 2));
  }
  return drawn;
}

// The figure's legend: entries in columns of equal width, row by row, in a strip of `height`.
const double kLegendRow = 18, kLegendPad = 10;

double legend_height(cairo_t* cr, const std::vector<Series>& legend, double W, int* per_row) {
  if (legend.empty()) return 0;
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 12);
  double widest = 0;
  for (const Series& s : legend) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s.name.c_str(), &e);
    widest = std::max(widest, e.x_advance);
  }
  *per_row = std::max(1, static_cast<int>((W - 2 * kLegendPad) / (widest + 56)));
  int rows = (static_cast<int>(legend.size()) + *per_row - 1) / *per_row;
  return rows * kLegendRow + 2 * kLegendPad;
}

std::vector<LegendSample> draw_legend(cairo_t* cr, const std::vector<Series>& legend, double W,
                                      double y0, int per_row) {
  std::vector<LegendSample> drawn;
  cairo_set_font_size(cr, 12);
  double column = (W - 2 * kLegendPad) / per_row;
  for (size_t i = 0; i < legend.size(); ++i) {
    double x = kLegendPad + 70 + column * static_cast<double>(i % static_cast<size_t>(per_row));
    double y = y0 + kLegendPad +
               kLegendRow * static_cast<double>(i / static_cast<size_t>(per_row)) + kLegendRow / 2;
    drawn.push_back(legend_entry(cr, legend[i], false, marked(legend[i]), x, y));
  }
  return drawn;
}

}  // namespace

FigureDrawn save_figure(const Figure& f, const std::string& path) {
  BV_CHECK(!f.panels.empty(), "plot '", path, "': no panels");
  bool svg = path.size() > 4 && path.compare(path.size() - 4, 4, ".svg") == 0;
  bool png = path.size() > 4 && path.compare(path.size() - 4, 4, ".png") == 0;
  BV_CHECK(svg || png, "plot '", path, "': the file name must end in .png or .svg");
  int cols = std::max(1, std::min(f.columns, static_cast<int>(f.panels.size())));
  int rows = (static_cast<int>(f.panels.size()) + cols - 1) / cols;
  double W = f.panel_width * cols, H = f.panel_height * rows;
  int per_row = 1;
  {  // The legend's height depends on its text's extents: measured on a scratch surface.
    cairo_surface_t* scratch = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t* measure = cairo_create(scratch);
    H += legend_height(measure, f.legend, W, &per_row);
    cairo_destroy(measure);
    cairo_surface_destroy(scratch);
  }
  cairo_surface_t* surface = svg ? cairo_svg_surface_create(path.c_str(), W, H)
                                 : cairo_image_surface_create(CAIRO_FORMAT_RGB24,
                                                              static_cast<int>(W),
                                                              static_cast<int>(H));
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> own(surface, cairo_surface_destroy);
  BV_CHECK(cairo_surface_status(surface) == CAIRO_STATUS_SUCCESS, "plot '", path,
           "': ", cairo_status_to_string(cairo_surface_status(surface)));
  cairo_t* cr = cairo_create(surface);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  FigureDrawn drawn;
  for (size_t i = 0; i < f.panels.size(); ++i) {
    double x0 = f.panel_width * static_cast<double>(i % static_cast<size_t>(cols));
    double y0 = f.panel_height * static_cast<double>(i / static_cast<size_t>(cols));
    cairo_save(cr);
    cairo_translate(cr, x0, y0);
    drawn.panels.push_back(draw_panel(cr, f.panels[i], f.panel_width, f.panel_height));
    cairo_restore(cr);
    for (LegendSample& l : drawn.panels.back().legend) l.x += x0, l.y += y0;
  }
  if (!f.legend.empty())
    drawn.legend = draw_legend(cr, f.legend, W, f.panel_height * rows, per_row);
  cairo_status_t status = cairo_status(cr);
  cairo_destroy(cr);
  BV_CHECK(status == CAIRO_STATUS_SUCCESS, "plot '", path, "': ", cairo_status_to_string(status));
  if (png) {
    cairo_status_t written = cairo_surface_write_to_png(surface, path.c_str());
    BV_CHECK(written == CAIRO_STATUS_SUCCESS, "plot: cannot write '", path,
             "': ", cairo_status_to_string(written));
  }
  cairo_surface_finish(surface);
  BV_CHECK(cairo_surface_status(surface) == CAIRO_STATUS_SUCCESS, "plot: cannot write '", path,
           "': ", cairo_status_to_string(cairo_surface_status(surface)));
  return drawn;
}

void save_contact_sheet(const std::vector<Tile>& tiles, int columns, int cell,
                        const std::string& path) {
  BV_CHECK(!tiles.empty(), "contact sheet '", path, "': no pictures");
  BV_CHECK(columns > 0 && cell > 0, "contact sheet: columns and cell size must be positive");
  const int title_h = 28, pad = 8;
  int cols = std::min(columns, static_cast<int>(tiles.size()));
  int rows = (static_cast<int>(tiles.size()) + cols - 1) / cols;
  int W = cols * (cell + pad) + pad, H = rows * (cell + title_h + pad) + pad;
  cairo_surface_t* sheet = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> own(sheet, cairo_surface_destroy);
  cairo_t* cr = cairo_create(sheet);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, 14);
  for (size_t i = 0; i < tiles.size(); ++i) {
    const Tile& t = tiles[i];
    BV_CHECK(t.height > 0 && t.width > 0 &&
                 t.rgb.size() == static_cast<size_t>(t.height) * static_cast<size_t>(t.width) * 3,
             "contact sheet: picture ", i + 1, " has ", t.rgb.size(), " bytes for ", t.height, "x",
             t.width, " RGB");
    // cairo's RGB24 is a 32-bit word per pixel.
    cairo_surface_t* img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, t.width, t.height);
    std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> own_img(img,
                                                                         cairo_surface_destroy);
    cairo_surface_flush(img);
    unsigned char* data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (int y = 0; y < t.height; ++y) {
      auto* row = reinterpret_cast<uint32_t*>(data + static_cast<ptrdiff_t>(y) * stride);
      const unsigned char* src = t.rgb.data() + static_cast<size_t>(y) * t.width * 3;
      for (int x = 0; x < t.width; ++x, src += 3) {
        row[x] = (uint32_t{src[0]} << 16) | (uint32_t{src[1]} << 8) | uint32_t{src[2]};
      }
    }
    cairo_surface_mark_dirty(img);
    double x0 = pad + static_cast<double>(i % static_cast<size_t>(cols)) * (cell + pad);
    double y0 = pad + static_cast<double>(i / static_cast<size_t>(cols)) * (cell + title_h + pad);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, t.title, x0 + cell / 2.0, y0 + title_h / 2.0, 0.5, 0.5);
    double scale =
        std::min(static_cast<double>(cell) / t.width, static_cast<double>(cell) / t.height);
    cairo_save(cr);
    cairo_translate(cr, x0 + (cell - t.width * scale) / 2, y0 + title_h);
    cairo_scale(cr, scale, scale);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_paint(cr);
    cairo_restore(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x0 + (cell - t.width * scale) / 2, y0 + title_h, t.width * scale,
                    t.height * scale);
    cairo_stroke(cr);
  }
  cairo_destroy(cr);
  cairo_status_t written = cairo_surface_write_to_png(sheet, path.c_str());
  BV_CHECK(written == CAIRO_STATUS_SUCCESS, "contact sheet: cannot write '", path,
           "': ", cairo_status_to_string(written));
}

}  // namespace bv::plot
