// Every CPU kernel of the framework-free core (csrc/flip/cpu/kernels.h) and the float functions of
// fastmath.h on fixed inputs, without PyTorch, writing their outputs' raw bytes to one file, so that
// builds for different architectures can be compared bit for bit. tests/cpu/test_aarch64.py builds it
// for x86-64 (natively) and for aarch64 (Debian's cross compiler; run under qemu-user) and compares.
//
//   core_outputs OUT     writes OUT and prints one line per record ("name type count")
//
// Inputs come from an integer generator (splitmix64) and exact scalings, never from <random>'s
// distributions, so both builds read the very same bits. Every kernel runs in float and double;
// images are 70 pixels wide, so the filters' register blocks (64 floats, 32 doubles) and their
// remainders both run, and one small image (5 x 9) is narrower and shorter than the filters.
//
// Record format (little-endian): u32 name length, the name, u8 type ('f' float32, 'd' float64,
// 'i' int32), u64 element count, the elements' bytes.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flip/cpu/kernels.h"
#include "flip/cpu/parallel.h"
#include "flip/fastmath.h"

// The kernels' threading seam (parallel.h), as the standalone benchmarks fill it: one thread, the
// whole range at once. The kernels' bits do not depend on how a range is split
// (tests/cpu/test_cpu_dispatch.py and the ops run threaded).
#include "../../benchmarks/serial_parallel_for.h"

// The same cbrt and exp2 on both architectures, which the C library's are not: glibc's x86-64 and
// aarch64 builds differ on FLIP's inputs by up to 4 ulp (cbrt) and 1 ulp (exp2), aarch64's
// contracting its own a * b + c into fused multiply-adds. tests/cpu/test_aarch64.py links a second
// program whose kernel objects call these instead (objcopy --redefine-sym): the kernels' own
// arithmetic must then give the same float64 bits on both. Defined through pow, which both
// builds compute alike on these inputs (the "libm." records show it).
extern "C" double flip_same_cbrt(double x) {
  volatile double third = 1.0 / 3.0;  // volatile: never folded into a cbrt call
  const double r = std::pow(std::fabs(x), third);
  return std::signbit(x) ? -r : r;
}
extern "C" double flip_same_exp2(double x) {
  volatile double two = 2.0;  // volatile: never folded into an exp2 call
  return std::pow(two, x);
}

namespace {

using namespace flip::cpu;

FILE* out_file = nullptr;

template <class T>
constexpr char type_code() {
  return std::is_same<T, float>::value ? 'f' : std::is_same<T, double>::value ? 'd' : 'i';
}

template <class T>
void record(const std::string& name, const T* data, size_t count) {
  const uint32_t len = static_cast<uint32_t>(name.size());
  const char type = type_code<T>();
  const uint64_t n = count;
  std::fwrite(&len, sizeof len, 1, out_file);
  std::fwrite(name.data(), 1, name.size(), out_file);
  std::fwrite(&type, 1, 1, out_file);
  std::fwrite(&n, sizeof n, 1, out_file);
  if (count) std::fwrite(data, sizeof(T), count, out_file);
  std::printf("%s %c %llu\n", name.c_str(), type, static_cast<unsigned long long>(count));
}

template <class T>
void record(const std::string& name, const std::vector<T>& v) {
  record(name, v.data(), v.size());
}

void record_ok(const std::string& name, bool ok) {
  const int32_t v = ok ? 1 : 0;
  record(name + ".ok", &v, 1);
}

struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // In [0, 1), a multiple of 2^-24: exact in float and double alike.
  double unit() { return static_cast<double>(next() >> 40) * 0x1p-24; }
};

template <class T>
std::vector<T> uniform(Rng& rng, size_t n, double lo, double hi) {
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(lo + (hi - lo) * rng.unit());
  return v;
}

// A test image close to the reference (|d| <= 0.1), with a few pixels equal to it and a few just
// outside [0, 1] (the kernels clamp LDR input; the gradient there is the kink's).
template <class T>
std::vector<T> near(Rng& rng, const std::vector<T>& ref, double lo, double hi) {
  std::vector<T> v(ref.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double u = rng.unit();
    if (u < 0.05) {
      v[i] = ref[i];
    } else {
      const double x = static_cast<double>(ref[i]) + 0.2 * (rng.unit() - 0.5);
      v[i] = static_cast<T>(x < lo ? lo : x > hi ? hi : x);
    }
  }
  return v;
}

template <class T>
struct Case {
  std::string name;
  Shape s;
  std::vector<T> test, ref, grad;  // images N x 3 x H x W, the incoming gradient N x H x W
  int64_t plane() const { return s.h * s.w; }
  size_t images() const { return static_cast<size_t>(s.n * 3 * plane()); }
  size_t maps() const { return static_cast<size_t>(s.n * plane()); }
};

template <class T>
Case<T> make_case(const std::string& name, Shape s, uint64_t seed, double lo, double hi, double test_lo,
                  double test_hi) {
  Rng rng{seed};
  Case<T> c{name, s, {}, {}, {}};
  const size_t n = static_cast<size_t>(s.n * 3 * s.h * s.w);
  c.ref = uniform<T>(rng, n, lo, hi);
  c.test = near(rng, c.ref, test_lo, test_hi);
  c.grad = uniform<T>(rng, static_cast<size_t>(s.n * s.h * s.w), -1.0, 1.0);
  return c;
}

template <class T>
void ldr(const Case<T>& c, bool srgb, double ppd) {
  const std::string p = c.name + (srgb ? ".srgb" : ".linear");
  LdrFlipArgs<T> a;
  a.s = c.s;
  a.ppd = ppd;
  a.eps = 1e-15;
  a.srgb = srgb;
  a.test = c.test.data();
  a.ref = c.ref.data();

  std::vector<T> map(c.maps());
  a.out = map.data();
  record_ok(p + ".ldr_forward", ldr_flip_forward(a));
  record(p + ".ldr_forward.map", map);

  std::vector<T> gt(c.images()), gr(c.images());
  LdrFlipArgs<T> b = a;
  b.out = nullptr;
  b.grad = c.grad.data();
  b.g_test = gt.data();
  b.g_ref = gr.data();
  record_ok(p + ".ldr_backward", ldr_flip_backward(b));
  record(p + ".ldr_backward.g_test", gt);
  record(p + ".ldr_backward.g_ref", gr);

  // The pair autograd uses on the CPU: keep the sensitivities of both images, then the backward.
  std::vector<T> sens(2 * 7 * c.images() / 3), map2(c.maps());
  LdrFlipArgs<T> k = a;
  k.out = map2.data();
  k.sensitivities = sens.data();
  k.want_test = k.want_ref = true;
  record_ok(p + ".ldr_forward_sensitivities", ldr_flip_forward_sensitivities(k));
  record(p + ".ldr_forward_sensitivities.map", map2);
  record(p + ".ldr_forward_sensitivities.sensitivities", sens);
  std::vector<T> kt(c.images()), kr(c.images());
  LdrFlipArgs<T> kb = b;
  kb.sensitivities = sens.data();
  kb.g_test = kt.data();
  kb.g_ref = kr.data();
  record_ok(p + ".ldr_backward_sensitivities", ldr_flip_backward_sensitivities(kb));
  record(p + ".ldr_backward_sensitivities.g_test", kt);
  record(p + ".ldr_backward_sensitivities.g_ref", kr);

  // Multi-scale, keeping the test image's sensitivities only.
  const double ppds[2] = {ppd, ppd / 3};
  const double weights[2] = {0.625, 0.375};
  std::vector<T> msens(2 * 7 * c.images() / 3), mmap(c.maps()), mg(c.images());
  LdrFlipArgs<T> m = a;
  m.scales = 2;
  m.ppds = ppds;
  m.weights = weights;
  m.out = mmap.data();
  m.sensitivities = msens.data();
  m.want_test = true;
  record_ok(p + ".multiscale_forward", ldr_flip_multiscale_forward(m));
  record(p + ".multiscale_forward.map", mmap);
  LdrFlipArgs<T> mb = m;
  mb.out = nullptr;
  mb.grad = c.grad.data();
  mb.g_test = mg.data();
  record_ok(p + ".multiscale_backward", ldr_flip_multiscale_backward_sensitivities(mb));
  record(p + ".multiscale_backward.g_test", mg);
}

template <class T>
void hdr(const Case<T>& c, flip::ToneMapper tm, const char* tm_name, double ppd) {
  const std::string p = c.name + ".hdr_" + tm_name;
  // Per item: up to 3 exposures (stops), the second item using 2; non-integer stops so that
  // exp2 has work to do.
  const std::vector<T> exposures = {T(-2.25), T(-0.5), T(1.125), T(-1.0), T(0.75), T(3.0)};
  std::vector<int64_t> counts(static_cast<size_t>(c.s.n));
  for (size_t n = 0; n < counts.size(); ++n) counts[n] = n % 2 ? 2 : 3;
  HdrFlipArgs<T> a;
  a.s = c.s;
  a.ppd = ppd;
  a.eps = 1e-15;
  a.tone_mapper = tm;
  a.test = c.test.data();
  a.ref = c.ref.data();
  a.exposures = exposures.data();
  a.counts = counts.data();
  a.E = 3;
  std::vector<T> map(c.maps()), emap(c.maps());
  std::vector<int32_t> index(c.maps());
  a.out = map.data();
  a.exposure_map = emap.data();
  a.index = index.data();
  record_ok(p + ".forward", hdr_flip_forward(a));
  record(p + ".forward.map", map);
  record(p + ".forward.exposure_map", emap);
  record(p + ".forward.index", index);
  std::vector<T> gt(c.images()), gr(c.images());
  HdrFlipArgs<T> b = a;
  b.out = nullptr;
  b.exposure_map = nullptr;
  b.grad = c.grad.data();
  b.g_test = gt.data();
  b.g_ref = gr.data();
  record_ok(p + ".backward", hdr_flip_backward(b));
  record(p + ".backward.g_test", gt);
  record(p + ".backward.g_ref", gr);
}

// The single-stage ops: csf_filter on an opponent image, hunt_hyab on two filtered images,
// feature_difference on the first channels.
template <class T>
void stages(const Case<T>& c, double ppd) {
  const std::string p = c.name;
  std::vector<T> opp(c.images());
  for (size_t i = 0; i < opp.size(); ++i) opp[i] = c.test[i] - T(0.5);
  std::vector<T> gimg(c.images());
  for (size_t i = 0; i < gimg.size(); ++i) gimg[i] = c.grad[i % c.grad.size()];

  CsfFilterArgs<T> f;
  f.s = c.s;
  f.ppd = ppd;
  f.opponent = opp.data();
  std::vector<T> filtered(c.images()), gopp(c.images());
  f.out = filtered.data();
  record_ok(p + ".csf_forward", csf_filter_forward(f));
  record(p + ".csf_forward.out", filtered);
  CsfFilterArgs<T> fb = f;
  fb.out = nullptr;
  fb.grad = gimg.data();
  fb.g_opponent = gopp.data();
  record_ok(p + ".csf_backward", csf_filter_backward(fb));
  record(p + ".csf_backward.g_opponent", gopp);

  HuntHyabArgs<T> h;
  h.s = c.s;
  h.eps = 1e-15;
  h.test = c.test.data();
  h.ref = c.ref.data();
  std::vector<T> hmap(c.maps()), ht(c.images()), hr(c.images());
  h.out = hmap.data();
  record_ok(p + ".hunt_hyab_forward", hunt_hyab_forward(h));
  record(p + ".hunt_hyab_forward.map", hmap);
  HuntHyabArgs<T> hb = h;
  hb.out = nullptr;
  hb.grad = c.grad.data();
  hb.g_test = ht.data();
  hb.g_ref = hr.data();
  record_ok(p + ".hunt_hyab_backward", hunt_hyab_backward(hb));
  record(p + ".hunt_hyab_backward.g_test", ht);
  record(p + ".hunt_hyab_backward.g_ref", hr);

  // One channel per item: the first plane of each item's three.
  std::vector<T> t1(c.maps()), r1(c.maps());
  for (int64_t n = 0; n < c.s.n; ++n)
    for (int64_t i = 0; i < c.plane(); ++i) {
      t1[n * c.plane() + i] = c.test[n * 3 * c.plane() + i];
      r1[n * c.plane() + i] = c.ref[n * 3 * c.plane() + i];
    }
  FeatureDifferenceArgs<T> d;
  d.s = c.s;
  d.ppd = ppd;
  d.eps = 1e-15;
  d.test = t1.data();
  d.ref = r1.data();
  std::vector<T> dmap(c.maps()), dt(c.maps()), dr(c.maps());
  d.out = dmap.data();
  record_ok(p + ".feature_forward", feature_difference_forward(d));
  record(p + ".feature_forward.map", dmap);
  FeatureDifferenceArgs<T> db = d;
  db.out = nullptr;
  db.grad = c.grad.data();
  db.g_test = dt.data();
  db.g_ref = dr.data();
  record_ok(p + ".feature_backward", feature_difference_backward(db));
  record(p + ".feature_backward.g_test", dt);
  record(p + ".feature_backward.g_ref", dr);
}

template <class T>
void kernels(const char* type) {
  const double ppd = 67.02064327658225;  // FLIP's default: 0.7 m from a 0.7 m wide 3840-pixel display
  const std::string t(type);
  const auto big = make_case<T>(t + ".2x37x70", Shape{2, 37, 70}, 1, 0.0, 1.0, -0.02, 1.02);
  const auto small = make_case<T>(t + ".1x5x9", Shape{1, 5, 9}, 2, 0.0, 1.0, -0.02, 1.02);
  for (const auto* c : {&big, &small}) {
    ldr(*c, true, ppd);
    stages(*c, ppd);
  }
  ldr(big, false, 23.5);
  const auto bright = make_case<T>(t + ".2x21x70", Shape{2, 21, 70}, 3, 0.0, 6.0, 0.0, 6.5);
  hdr(bright, flip::ToneMapper::kAces, "aces", ppd);
  hdr(bright, flip::ToneMapper::kHable, "hable", 31.0);
  hdr(bright, flip::ToneMapper::kReinhard, "reinhard", 31.0);

  // A NaN in an input: every kernel reports it (the output is unspecified, so not compared).
  auto bad = small;
  bad.test[7] = std::nanf("");
  LdrFlipArgs<T> a;
  a.s = bad.s;
  a.ppd = ppd;
  a.srgb = true;
  a.test = bad.test.data();
  a.ref = bad.ref.data();
  std::vector<T> map(bad.maps());
  a.out = map.data();
  record_ok(bad.name + ".nan.ldr_forward", ldr_flip_forward(a));
}

// fastmath.h's float functions on every stride-th float of [lo, hi].
template <class Fn>
void sweep(const char* name, float lo, float hi, uint32_t stride, Fn fn) {
  std::vector<float> out;
  for (uint32_t b = flip::fastmath::float_bits(lo); b <= flip::fastmath::float_bits(hi); b += stride)
    out.push_back(fn(flip::fastmath::bits_float(b)));
  record(std::string("fastmath.") + name, out);
}

void fastmath() {
  namespace fm = flip::fastmath;
  const uint32_t stride = 997;
  const float tiny = 1e-45f, big = 3.4e38f;
  // The ranges FLIP feeds them (as tests/cpp/fastmath_accuracy.cpp), then all positive floats.
  sweep("cbrt.flip_range", 0.008f, 1.2f, stride, [](float x) { return fm::cbrt(x); });
  sweep("cbrt.all", tiny, big, stride * 97, [](float x) { return fm::cbrt(x); });
  sweep("pow_seven_fifths.flip_range", 0.05f, 1.0f, stride, [](float x) { return fm::pow_seven_fifths(x); });
  sweep("pow_seven_fifths.all", tiny, big, stride * 97, [](float x) { return fm::pow_seven_fifths(x); });
  sweep("pow_seven_tenths.hyab_range", 1e-8f, 400.0f, stride, [](float x) { return fm::pow_seven_tenths(x); });
  sweep("pow_seven_tenths.all", tiny, big, stride * 97, [](float x) { return fm::pow_seven_tenths(x); });
  sweep("pow_0.7.hyab_range", 1e-8f, 400.0f, stride, [](float x) { return fm::pow(x, 0.7f); });
  sweep("log.unit", tiny, 1.0f, stride, [](float x) { return fm::log(x); });
  sweep("log.all", tiny, big, stride * 97, [](float x) { return fm::log(x); });
  // pow on pairs: (c, 1 - f) for c, f in [0, 1] (FLIP's final step), and wide bases and exponents.
  Rng rng{4};
  std::vector<float> unit, wide;
  for (int i = 0; i < 100000; ++i) {
    const float c = static_cast<float>(rng.unit()), f = static_cast<float>(rng.unit());
    unit.push_back(fm::pow(c, 1.0f - f));
    const float x = fm::bits_float(static_cast<uint32_t>(rng.next() >> 33)),
                y = static_cast<float>(rng.unit() * 40 - 20);
    wide.push_back(fm::pow(x, y));
  }
  record("fastmath.pow.unit_pairs", unit);
  record("fastmath.pow.wide_pairs", wide);
  // The special values (the standard library's, tests/cpu/test_fastmath.py).
  const float specials[] = {0.0f, -0.0f, 1e-45f, 1e-40f, 1.0f, INFINITY, -INFINITY, std::nanf(""), -1.0f, 2.0f};
  std::vector<float> sp;
  for (float x : specials) {
    sp.push_back(fm::cbrt(x));
    sp.push_back(fm::pow_seven_fifths(x));
    sp.push_back(fm::pow_seven_tenths(x));
    sp.push_back(fm::log(x));
    for (float y : specials) sp.push_back(fm::pow(x, y));
  }
  record("fastmath.special_values", sp);
}

// The C library's double functions that double kernels call (math::* for double: pow, cbrt, log;
// the taps' exp, both types; HDR-FLIP's exp2 of an exposure, float and double), on the ranges the
// kernels use them. Recorded under "libm." so that a difference there is told apart from one of
// the kernels' own arithmetic.
void libm() {
  Rng rng{5};
  std::vector<double> pow14, pow07, cbrt, log, powcf, exp, exp2;
  std::vector<float> exp2f;
  for (int i = 0; i < 50000; ++i) {
    const double u = rng.unit() + rng.unit() * 0x1p-24;  // 48 random bits
    pow14.push_back(std::pow(0.05 + 0.95 * u, 1.4));
    pow07.push_back(std::pow(400.0 * u, 0.7));
    cbrt.push_back(std::cbrt(0.008 + 1.2 * u));
    log.push_back(std::log(u));
    powcf.push_back(std::pow(u, 1.0 - rng.unit()));
    exp.push_back(std::exp(-60.0 * u));
    exp2.push_back(std::exp2(40.0 * u - 20.0));
    exp2f.push_back(std::exp2(static_cast<float>(40.0 * u - 20.0)));
  }
  record("libm.pow_1.4", pow14);
  record("libm.pow_0.7", pow07);
  record("libm.cbrt", cbrt);
  record("libm.log", log);
  record("libm.pow_c_1_minus_f", powcf);
  record("libm.exp", exp);
  record("libm.exp2", exp2);
  record("libm.exp2f", exp2f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
    return 2;
  }
  out_file = std::fopen(argv[1], "wb");
  if (!out_file) {
    std::perror(argv[1]);
    return 1;
  }
  std::printf("capability %s\n", capability());
  kernels<float>("float32");
  kernels<double>("float64");
  fastmath();
  libm();
  return std::fclose(out_file) == 0 ? 0 : 1;
}
