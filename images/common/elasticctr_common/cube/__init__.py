"""What serving needs of cube, without the cube image: cube.conf (`conf`, written by the
Pulumi program, read by cube-transfer and serving) and the client library (`client`,
`protocol`; needs numpy, which the cube and serving images have)."""
