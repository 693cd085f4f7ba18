"""The MXNet (Gluon) backend. Importing its modules imports mxnet: worker side only."""
