# Under the sanitizers every vector load of the kernels is checked through a call, which makes the 2M
# speculative samples of this test take most of an hour: sanitizer builds run a quarter of them (the
# broken-residual controls still fail at that size, p < 1e-20).
if(VLMSPEC_SANITIZE)
  set_property(TEST spec_sampling APPEND PROPERTY ENVIRONMENT "VLMSPEC_SAMPLING_SCALE=0.25")
endif()
