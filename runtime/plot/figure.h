// Line charts for `bvlua plot`, drawn with cairo into PNG or SVG: a row or grid of panels, each
// with its own axes, tick labels, title and legend, and optionally a second y axis on the right
// (dashed lines: the tutorial's eval accuracy over the training loss).
#pragma once

#include <string>
#include <vector>

namespace bv::plot {

struct Series {
  std::string name;          // the legend's text ("": not in the legend)
  int color = 0;             // an index into the palette (the same run, the same colour);
                             // -1 is dark grey (a legend entry that names a line style)
  int dash = 0;              // 0 solid, 1 dashed, 2 dotted, 3 dash-dot (right axis: 0 is dashed)
  std::vector<double> x, y;  // points, drawn in order; NaN values are skipped
  // A dot on each point, and on the legend's sample. A series of at most kMarkedPoints points
  // (evaluations, a lone point) is marked anyway; a legend entry without points (one naming a
  // line style) is marked when a series of its list drawn in that style is.
  bool marker = false;
};

constexpr int kMarkedPoints = 30;

struct Panel {
  std::string title, xlabel, ylabel, ylabel_right;
  std::vector<Series> series;        // on the left y axis, solid
  std::vector<Series> series_right;  // on the right y axis, dashed
};

struct Figure {
  std::vector<Panel> panels;
  std::vector<Series> legend;                 // a strip under the panels (runs, by colour)
  int columns = 2;                            // panels per row
  int panel_width = 560, panel_height = 400;  // points (SVG) or pixels (PNG)
};

// What save_figure drew, for `bvlua plot -v` and its test: each axis's range (widened to whole
// ticks) and tick labels, and where each legend entry's sample is (its centre, in pixels of the
// figure) and whether it shows the marker.
struct Axis {
  double lo = 0, hi = 0;
  std::vector<std::string> ticks;
};

struct LegendSample {
  std::string name;
  double x = 0, y = 0;
  bool marker = false;
};

struct PanelDrawn {
  Axis x, y, y_right;  // y_right: only for a panel with series_right (else no ticks)
  std::vector<LegendSample> legend;
};

struct FigureDrawn {
  std::vector<PanelDrawn> panels;
  std::vector<LegendSample> legend;
};

// Draws `figure` into `path`: .png or .svg by its extension (else an error naming the path).
FigureDrawn save_figure(const Figure& figure, const std::string& path);

// One picture of a contact sheet: RGB bytes, row-major [height][width][3], and its title.
struct Tile {
  int height = 0, width = 0;
  std::vector<unsigned char> rgb;
  std::string title;
};

// A grid of pictures, each scaled to fit a `cell` x `cell` square under its title (the
// tutorial's picture of mistakes: "Pred: 1   GT: 2"), written as a PNG.
void save_contact_sheet(const std::vector<Tile>& tiles, int columns, int cell,
                        const std::string& path);

}  // namespace bv::plot
