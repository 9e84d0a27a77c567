"""Images and what is known of them: references, shipped knowledge, NVIDIA_REQUIRE_*, facts."""
