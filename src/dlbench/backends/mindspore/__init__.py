"""The MindSpore backend. Importing its modules imports mindspore: worker side only."""
