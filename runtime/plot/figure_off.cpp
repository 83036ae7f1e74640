// bvlua built with -DBV_PLOTS=OFF (no cairo; scripts/gpu_check's build on a machine without our
// Debian packages): the plot functions exist and say why they cannot draw. CMakeLists.txt
// compiles this file instead of figure.cpp.
#include "core/error.h"
#include "plot/figure.h"

namespace bv::plot {

namespace {
[[noreturn]] void no_cairo(const std::string& path) {
  fail("cannot draw '", path, "': this bvlua was built without cairo (-DBV_PLOTS=OFF); ",
       "rebuild with BV_PLOTS=ON (the default) for bvlua plot and contact sheets");
}
}  // namespace

FigureDrawn save_figure(const Figure&, const std::string& path) { no_cairo(path); }

void save_contact_sheet(const std::vector<Tile>&, int, int, const std::string& path) {
  no_cairo(path);
}

}  // namespace bv::plot
