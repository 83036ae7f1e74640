// Forward declarations for headers that name at::Tensor and bv::Rng without including libtorch:
// widely included headers stay cheap to compile, and their .cpp files include the real thing.
#pragma once

namespace at {
class Tensor;
}

namespace bv {
struct Rng;
}
