{
  "targets": [
    {
      "target_name": "sluice_sendfile",
      "sources": ["native/sendfile.cc", "native/file-lock.cc", "native/memory-pressure.cc", "native/stat-files.cc", "native/exec-self.cc", "native/parked-sockets.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-O2", "-Wall", "-Wextra"]
    }
  ]
}
