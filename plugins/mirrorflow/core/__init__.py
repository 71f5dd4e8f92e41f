"""MM2 concepts as pure logic: standard library only, so Spark executors and client tools can import it."""
