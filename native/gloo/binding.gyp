{
  # Node-API addon binding Gloo (Debian/Ubuntu: apt-get install libgloo-dev) for ssl-zoo's
  # ProcessGroup. Built by scripts/build-native.mjs (npm run build:native).
  "targets": [
    {
      "target_name": "ssl_zoo_gloo",
      "sources": ["src/addon.cc", "src/tcp_store.cc"],
      "include_dirs": ["<!@(node -p \"require('node-addon-api').include\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "HIREDIS_NESTED_INCLUDE"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-std=gnu++20"],
      "cflags_cc": ["-std=c++17", "-O3", "-fexceptions", "-frtti", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": ["-lgloo", "-lhiredis", "-lpthread"]
    }
  ]
}
