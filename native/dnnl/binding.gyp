{
  "targets": [
    {
      "target_name": "ssl_zoo_dnnl",
      "sources": [
        "src/addon.cc", "src/dnnl_ops.cc", "src/measure_ghz.cc", "src/cpu_ops_bindings.cc",
        "src/elementwise.cc", "src/reduce.cc", "src/tile_transpose.cc", "src/norm.cc", "src/pool.cc", "src/softmax.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "dependencies": ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api_except"],
      "defines": ["NAPI_VERSION=8"],
      "cflags!": ["-fno-exceptions", "-O2"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++14", "-O2"],
      "cflags_cc": ["-std=c++17", "-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"],
      "ldflags": ["-fopenmp"],
      "libraries": ["-ldnnl"]
    }
  ]
}
