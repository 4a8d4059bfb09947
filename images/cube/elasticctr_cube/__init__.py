"""elasticctr cube: builder, server (native), agent, transfer and the client library."""
