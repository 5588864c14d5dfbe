"""The process and its shells (client RESP, cluster bus, AOF file), the output
driver they share with in-process nodes and the simulator. See server/process.py."""
