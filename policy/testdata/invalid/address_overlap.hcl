# ":18000" listens on every interface, 127.0.0.1 included.
xds   { address = ":18000" }
admin { address = "127.0.0.1:18000" }
